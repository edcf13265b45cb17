/** The fuzz corpus: every fixture arch/variant in both layouts (and native projector files), serialized. */
import { serializeGguf } from "@compat/gguf";
import { allFixtureVariants, generateFixture, type FixtureLayout } from "@compat/testkit";
import { scanHeader, type HeaderMap } from "./scan";

export interface CorpusEntry {
  /** `<arch>/<variant>/<layout>[/mmproj]`. */
  readonly name: string;
  readonly bytes: Uint8Array;
  readonly map: HeaderMap;
  /** Relative chance of being picked: files over 1 MiB (big vocabularies) are picked 8x less often, they cost 10-50x more per input. */
  readonly weight: number;
}

const BIG = 1 << 20;

export async function buildFuzzCorpus(seed = 1): Promise<CorpusEntry[]> {
  const entries: CorpusEntry[] = [];
  const add = async (name: string, model: Parameters<typeof serializeGguf>[0]) => {
    const bytes = (await serializeGguf(model)).slice();
    entries.push({ name, bytes, map: scanHeader(bytes), weight: bytes.length > BIG ? 1 : 8 });
  };
  for (const { arch, variant } of allFixtureVariants()) {
    for (const layout of ["ollama", "native"] as FixtureLayout[]) {
      const f = generateFixture(arch, { seed, layout, variant });
      await add(`${arch}/${variant}/${layout}`, f.text);
      if (f.mmproj) await add(`${arch}/${variant}/${layout}/mmproj`, f.mmproj);
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
