// Ollama-format blobs of a chosen size for the peer bench. Each is the testkit's toy Ollama file
// of the architecture (Ollama's keys, tensor names, tensor order and types), grown: the text
// model gets BLOCKS blocks and every width times k (embedding, feed-forward, head counts; the
// head size stays, so the rope sections and per-head norms stay valid), a vocabulary padded with
// unused tokens to VOCAB_PER_WIDTH rows per unit of width, the projector's output
// follows the text width, and the vision tower keeps its toy size (the bench loads the text
// model only). k is the largest whose file fits the size asked for. The grown tensors get
// values drawn much as the testkit draws them (fan-in scaled matrices, norms near 1), from pools
// reused along each tensor, so that making 1.4 GiB takes seconds, not minutes.
import { GgmlType, GgufModel, GgufValueType, writeGguf, type GgufTensor } from "@compat/gguf";
import { compareBytewise, generateFixture, hash32, ollamaBlockIndex, Prng, toHalfBits } from "@compat/testkit";

const MiB = 2 ** 20;
/** Text blocks of every grown model (the glmocr had 12). */
const BLOCKS = 12;
/** Vocabulary rows per unit of width (GLM-OCR: 59,392 rows, 1,536 wide; this keeps the embeddings about an eighth of the file). */
const VOCAB_PER_WIDTH = 8;

interface Growth {
  /** The fixture variant grown: Ollama's single file, vision inline. */
  readonly variant: string;
  /** Keys under `<arch>.` that count widths or heads: multiplied by k. */
  readonly widthKeys: readonly string[];
  /** Tensors outside the text model with dims (indexes into the shape) that are the text width. */
  readonly textWidthDims: Readonly<Record<string, readonly number[]>>;
}

const GROWTH: Record<"glmocr" | "gemma3", Growth> = {
  glmocr: {
    variant: "default",
    widthKeys: ["embedding_length", "feed_forward_length", "attention.head_count", "attention.head_count_kv", "vision.out_hidden_size"],
    // the patch merger projects the tower into vision.out_hidden_size, the text width
    textWidthDims: {
      "mm.patch_merger.weight": [3],
      "mm.patch_merger.bias": [0],
      "mm.model.fc.weight": [0, 1],
      "mm.post_norm.weight": [0],
      "mm.post_norm.bias": [0],
      "mm.gate.weight": [0],
      "mm.up.weight": [0],
      "mm.down.weight": [1],
    },
  },
  gemma3: {
    variant: "4b-vision",
    widthKeys: ["embedding_length", "feed_forward_length", "attention.head_count", "attention.head_count_kv"],
    textWidthDims: { "mm.mm_input_projection.weight": [0] },
  },
};

const isText = (name: string) => name.startsWith("blk.") || ["token_embd.weight", "output.weight", "output_norm.weight"].includes(name);

/** The dims of a text tensor that grow: all but the head size of per-head norms; the embeddings' rows become `rows`. */
function grownTextShape(name: string, shape: readonly number[], k: number, rows: number): number[] {
  if (/\.attn_[qk]_norm\.weight$/.test(name)) return [...shape];
  const vocab = name === "token_embd.weight" || name === "output.weight";
  return shape.map((d, i) => (vocab && i === 1 ? rows : d * k));
}

/**
 * Unused tokens (type 5, as llama.cpp calls them), inserted where the embedding rows end (the
 * toy gemma3 vision file, as Ollama's, has one token past them): a real vocabulary is tens of
 * thousands of rows, and Ollama's runtime needs the file to go on past its last block at least
 * as far as that block's ffn_up (it bounds-checks the fused gate+up it makes in place of
 * ffn_up against the file: a toy vocabulary at these widths fails it).
 */
function padVocabulary(m: GgufModel, from: number, pads: number): void {
  const insert = <T>(key: string, itemType: GgufValueType, pad: (i: number) => T) => {
    const a = m.tryGetArray(key);
    if (a === undefined) return;
    const values = a.toArray() as T[];
    values.splice(from, 0, ...Array.from({ length: pads }, (_, i) => pad(i)));
    m.setArray(key, itemType, values as never);
  };
  insert("tokenizer.ggml.tokens", GgufValueType.STRING, (i) => `<|bench_unused_${i}|>`);
  insert("tokenizer.ggml.scores", GgufValueType.FLOAT32, () => 0);
  insert("tokenizer.ggml.token_type", GgufValueType.INT32, () => 5);
}

type Init = "matrix" | "norm" | "bias";

/**
 * The embeddings too are fan-in scaled, unlike the testkit's ±0.5: at these widths a tied
 * output (gemma3) on ±0.5 embeddings scaled by sqrt(width) gives the prompt's last token a
 * lead of ~150 nats, every other probability rounds to 0, and log-probabilities compare nothing.
 */
function initOf(name: string, shape: readonly number[]): Init {
  if (name.endsWith(".bias")) return "bias";
  return shape.length === 1 ? "norm" : "matrix";
}

/**
 * About a million values of one distribution in one type, made once and reused. A prime count:
 * no width divides it, so no two rows of a tensor repeat each other (equal rows would give
 * equal logits, whose order in a top-10 is then arbitrary).
 */
const pools = new Map<string, Uint8Array>();
function pool(type: GgmlType, init: Init, fanIn: number): Uint8Array {
  const scale = init === "matrix" ? 1 / Math.sqrt(fanIn) : init === "norm" ? 0.05 : 0.02;
  const key = `${type} ${init} ${scale}`;
  let bytes = pools.get(key);
  if (bytes !== undefined) return bytes;
  const n = 1_000_003;
  const rng = Prng.forLabel(1, key);
  const value = () => (init === "norm" ? 1 : 0) + rng.symmetric(scale);
  if (type === GgmlType.F16) {
    const h = new Uint16Array(n);
    for (let i = 0; i < n; i++) h[i] = toHalfBits(value());
    bytes = new Uint8Array(h.buffer);
  } else {
    const f = new Float32Array(n);
    for (let i = 0; i < n; i++) f[i] = value();
    bytes = new Uint8Array(f.buffer);
  }
  pools.set(key, bytes);
  return bytes;
}

function elementSize(t: GgufTensor): number {
  if (t.type === GgmlType.F16) return 2;
  if (t.type === GgmlType.F32) return 4;
  throw new Error(`peer bench: ${t.name} is of ggml type ${t.type}; only F16 and F32 tensors are grown`);
}

/** A tensor of `shape` whose bytes are the pool of its distribution, read from a place of its own name. */
function generated(name: string, type: GgmlType, shape: number[], init: Init): GgufTensor {
  const size = type === GgmlType.F16 ? 2 : 4;
  const length = shape.reduce((a, b) => a * b, 1) * size;
  return {
    name,
    type,
    shape,
    data: {
      kind: "computed",
      length,
      label: `peer bench ${init}`,
      produce: async () => {
        const src = pool(type, init, shape[0]!);
        const out = new Uint8Array(length);
        let at = 0;
        let from = (hash32(name) % (src.length / size)) * size;
        while (at < length) {
          const n = Math.min(length - at, src.length - from);
          out.set(src.subarray(from, from + n), at);
          at += n;
          from = 0;
        }
        return out;
      },
    },
  };
}

/** The fixture grown by width factor k (see the file comment). */
function grow(arch: keyof typeof GROWTH, toy: GgufModel, k: number): GgufModel {
  const g = GROWTH[arch];
  const m = new GgufModel({ kvs: toy.kvs() });
  for (const key of g.widthKeys) m.setU32(`${arch}.${key}`, toy.getU32(`${arch}.${key}`) * k);
  m.setU32(`${arch}.block_count`, BLOCKS);
  const toyRows = toy.tensor("token_embd.weight").shape[1]!;
  const rows = Math.max(toyRows, VOCAB_PER_WIDTH * toy.getU32(`${arch}.embedding_length`) * k);
  padVocabulary(m, toyRows, rows - toyRows);
  const tensors: GgufTensor[] = [];
  for (const t of toy.tensors) {
    elementSize(t);
    if (t.name.startsWith("blk.")) {
      if (!t.name.startsWith("blk.0.")) continue;
      const shape = grownTextShape(t.name, t.shape, k, rows);
      for (let b = 0; b < BLOCKS; b++) {
        const name = `blk.${b}.${t.name.slice("blk.0.".length)}`;
        tensors.push(generated(name, t.type, shape, initOf(name, shape)));
      }
    } else if (isText(t.name)) {
      const shape = grownTextShape(t.name, t.shape, k, rows);
      tensors.push(generated(t.name, t.type, shape, initOf(t.name, shape)));
    } else if (g.textWidthDims[t.name] !== undefined) {
      const dims = g.textWidthDims[t.name]!;
      const shape = t.shape.map((d, i) => (dims.includes(i) ? d * k : d));
      tensors.push(generated(t.name, t.type, shape, initOf(t.name, shape)));
    } else {
      tensors.push(t); // the toy tower, its values as the testkit made them
    }
  }
  // Ollama's WriteGGUF order: by block index, then by name
  tensors.sort((a, b) => ollamaBlockIndex(a.name) - ollamaBlockIndex(b.name) || compareBytewise(a.name, b.name));
  for (const t of tensors) m.addTensor(t);
  return m;
}

const dataBytes = (m: GgufModel) => m.tensors.reduce((s, t) => s + (t.data.kind === "bytes" ? t.data.bytes.length : t.data.length), 0);

export interface GrownBlob {
  readonly path: string;
  /** Size of the file written. */
  readonly bytes: number;
  /** The text model's shape, for the table's caption. */
  readonly shape: string;
}

/** Writes an Ollama-format `arch` blob of at most `mib` MiB (at least the toy widths, 12 blocks) to `path`. */
export async function writeOllamaBlob(arch: keyof typeof GROWTH, mib: number, path: string): Promise<GrownBlob> {
  const toy = generateFixture(arch, { seed: 1, layout: "ollama", variant: GROWTH[arch].variant }).text;
  let k = 1;
  while (dataBytes(grow(arch, toy, k + 1)) <= mib * MiB) k++;
  const m = grow(arch, toy, k);
  const r = await writeGguf(m, path);
  const n = (key: string) => m.getU32(`${arch}.${key}`);
  return {
    path,
    bytes: r.bytesWritten,
    shape: `${n("block_count")} blocks, width ${n("embedding_length")}, feed-forward ${n("feed_forward_length")}, ${n("attention.head_count")} heads, ${m.tensor("token_embd.weight").shape[1]} vocabulary rows, F16`,
  };
}
