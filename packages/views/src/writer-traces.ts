import type { GgufModel } from "@compat/gguf";

const utf8 = new TextEncoder();

/** Byte-wise (UTF-8) string order, as Go's string comparison. */
function compareBytes(a: string, b: string): number {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  for (let i = 0; i < x.length && i < y.length; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

/**
 * The block index Ollama's writer sorts by (fs/ggml/ggml.go, Tensor.block: `fmt.Sscanf(name,
 * "blk.%d.")`, which takes a sign too), +Infinity (Go's math.MaxInt) for every other tensor.
 */
function blockIndex(name: string): number {
  const m = /^blk\.([+-]?\d+)\./.exec(name);
  return m ? Number(m[1]) : Number.POSITIVE_INFINITY;
}

function sortedBy<T>(items: readonly T[], cmp: (a: T, b: T) => number): boolean {
  for (let i = 1; i < items.length; i++) if (cmp(items[i - 1]!, items[i]!) > 0) return false;
  return true;
}

/**
 * The traces Ollama's GGUF writer leaves in a file (docs/reference/ollama-writer.md §1-3),
 * whatever the architecture: tensors stably sorted by (block index, name) with every
 * non-block tensor (token_embd, output…) after the blocks, and KVs in byte-wise key order
 * (the key as the converter set it: fully prefixed, or bare and prefixed on write).
 * llama.cpp's converter writes `general.architecture` first and `token_embd` before the
 * blocks, so neither holds for its files. Returns the markers, or null when the file does
 * not look Ollama-written (both orders are needed: one alone can happen by chance).
 * The fixture kit models the writer on its own (testkit's applyOllamaOrder, from Ollama's
 * sources), so the tests check this detector against an independent model of what it detects.
 */
export function ollamaWriterMarkers(model: GgufModel): string[] | null {
  const names = model.tensors.map((t) => t.name);
  const blocks = names.filter((n) => blockIndex(n) !== Number.POSITIVE_INFINITY).length;
  if (blocks === 0 || blocks === names.length) return null;
  const tensorOrder = sortedBy(names, (a, b) => {
    const ba = blockIndex(a);
    const bb = blockIndex(b);
    return ba !== bb ? (ba < bb ? -1 : 1) : compareBytes(a, b);
  });
  if (!tensorOrder) return null;
  const keys = model.kvs().map((kv) => kv.key);
  const arch = model.getString("general.architecture", "");
  const bare = (k: string) => (arch && k.startsWith(`${arch}.`) ? k.slice(arch.length + 1) : k);
  const fullOrder = sortedBy(keys, compareBytes);
  const bareOrder = !fullOrder && sortedBy(keys, (a, b) => compareBytes(bare(a), bare(b)));
  if (!fullOrder && !bareOrder || keys.length < 3) return null;
  const markers = [
    `tensors sorted by (block, name) with ${names.find((n) => blockIndex(n) === Number.POSITIVE_INFINITY)} after the blocks`,
    `KVs in byte-wise key order${bareOrder ? " (bare keys)" : ""}`,
  ];
  if (!model.has("general.alignment")) markers.push("no general.alignment");
  return markers;
}
