/**
 * The fuzz corpus: every fixture arch/variant in both layouts (and native projector files),
 * then the quantized fixtures (Ollama's Q4_K_M files and their llama-quantize twins), serialized.
 */
import { serializeGguf } from "@compat/gguf";
import { allFixtureVariants, generateFixture, quantizedFixtureVariants, type FixtureLayout } from "@compat/testkit";
import { scanHeader, type HeaderMap } from "./scan";

export interface CorpusEntry {
  /** `<arch>/<variant>/<layout>[/<quant>[/bf16towers]][/mmproj]`. */
  readonly name: string;
  readonly bytes: Uint8Array;
  readonly map: HeaderMap;
  /** Relative chance of being picked: files over 1 MiB (big vocabularies) are picked 8x less often, they cost 10-50x more per input. */
  readonly weight: number;
}

const BIG = 1 << 20;

export interface CorpusOptions {
  /**
   * Add the quantized fixtures (default true). Inputs are picked by weight over the whole
   * corpus, so a recipe (seed, index) found before they existed reproduces only without them.
   */
  readonly quantized?: boolean;
}

export async function buildFuzzCorpus(seed = 1, opts: CorpusOptions = {}): Promise<CorpusEntry[]> {
  const entries: CorpusEntry[] = [];
  const add = async (name: string, model: Parameters<typeof serializeGguf>[0]) => {
    const bytes = (await serializeGguf(model)).slice();
    entries.push({ name, bytes, map: scanHeader(bytes), weight: bytes.length > BIG ? 1 : 8 });
    // a turn of the event loop per file: generating the quantized fixtures is seconds of
    // synchronous work, and a caller's timers and I/O (a test runner's RPC) must not starve
    await new Promise((resolve) => setTimeout(resolve, 0));
  };
  for (const { arch, variant } of allFixtureVariants()) {
    for (const layout of ["ollama", "native"] as FixtureLayout[]) {
      const f = generateFixture(arch, { seed, layout, variant });
      await add(`${arch}/${variant}/${layout}`, f.text);
      if (f.mmproj) await add(`${arch}/${variant}/${layout}/mmproj`, f.mmproj);
    }
  }
  if (opts.quantized === false) return entries;
  for (const c of quantizedFixtureVariants()) {
    for (const layout of ["ollama", "native"] as FixtureLayout[]) {
      const f = generateFixture(c.arch, { seed, layout, ...c });
      const name = `${c.arch}/${c.variant}/${layout}/${c.quant}${c.bf16Towers ? "/bf16towers" : ""}`;
      await add(name, f.text);
      if (f.mmproj) await add(`${name}/mmproj`, f.mmproj);
    }
  }
  return entries;
}

/** Picks an entry by weight. */
export function pickEntry(corpus: readonly CorpusEntry[], r: number): CorpusEntry {
  const total = corpus.reduce((s, e) => s + e.weight, 0);
  let x = r * total;
  for (const e of corpus) {
    x -= e.weight;
    if (x < 0) return e;
  }
  return corpus[corpus.length - 1]!;
}
