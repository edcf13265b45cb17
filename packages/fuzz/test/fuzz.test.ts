// The CI share of `npm run fuzz`: 20,000 mutated corpus files (quantized fixtures included) with a fixed seed. Every input is
// parsed; every 20th also goes through detect, translate, view reads, an atomic write (re-read)
// and the clip view. Each must end in a result or a typed error.
import { describe, expect, it } from "vitest";
import { serializeGguf } from "@compat/gguf";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildFuzzCorpus, fullPipeline, fuzzInput, parseOnly, runFuzz, scanHeader, type CorpusEntry } from "@compat/fuzz";
import { allFixtureVariants, generateFixture, quantizedFixtureVariants } from "@compat/testkit";

let corpusOnce: Promise<CorpusEntry[]> | undefined;
const corpus = () => (corpusOnce ??= buildFuzzCorpus());
/** The corpus the regressions below were found in: before the quantized fixtures joined it (their recipes pick by weight over all entries). */
let floatCorpusOnce: Promise<CorpusEntry[]> | undefined;
const floatCorpus = () => (floatCorpusOnce ??= buildFuzzCorpus(1, { quantized: false }));

/** Inputs that once failed, as (seed, index) recipes of the fuzzer; each must now end in a result or a typed error. */
const REGRESSIONS: ReadonlyArray<{ seed: number; index: number; found: string }> = [
  { seed: 1, index: 167140, found: "hang: gemma4/moe-mixed with gemma4.block_count = 2^31 (handler looped over the count)" },
  { seed: 4, index: 43308, found: "out of memory: qwen3vlmoe/30b-a3b with qwen3vlmoe.vision.block_count = 2^32-1 (clip handler sized a mask by the count)" },
  { seed: 5, index: 173378, found: "RangeError: mistral3/small-3.1 with mistral3.embedding_length = 2^31-1 (clip handler sized the [IMG_BREAK] zero row by it)" },
];

describe("fuzz", () => {
  for (const r of REGRESSIONS) {
    it(`regression: seed ${r.seed} input ${r.index} (${r.found})`, async () => {
      const input = fuzzInput(await floatCorpus(), r.seed, r.index);
      const dir = await mkdtemp(join(tmpdir(), "compat-fuzz-regression-"));
      try {
        expect(parseOnly(input.bytes, "regression.gguf")).toMatch(/^(ok|error:)/);
        expect(await fullPipeline(input.bytes, "regression.gguf", { tmpDir: dir, seed: r.seed, index: r.index })).toMatch(/^(ok|nothing|error:)/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 120_000);
  }

  it("20,000 mutated corpus files (seed 20261130; 1 in 20 through the full pipeline) end in a result or a typed error", async () => {
    const stats = await runFuzz({ corpus: await corpus(), seed: 20261130, count: 20_000, fullEvery: 20 });
    console.log(
      `fuzz: ${stats.inputs} inputs (${stats.full} full pipeline), slowest ${stats.maxMs.toFixed(0)} ms (#${stats.maxMsIndex}), ` +
        `largest memory growth ${(stats.maxMemGrowth / 2 ** 20).toFixed(1)} MiB (#${stats.maxMemGrowthIndex}), max rss ${(stats.maxRss / 2 ** 20).toFixed(0)} MiB`,
    );
    expect(stats.failures).toEqual([]);
    expect(stats.inputs).toBe(20_000);
    // the mix reaches the translators, not only the parser
    expect(stats.outcomes["full:ok"]).toBeGreaterThan(0);
  }, 600_000);

  it("is deterministic: input (seed, index) is the same bytes and recipe every time", async () => {
    const entries = await corpus();
    for (const index of [0, 1, 977, 19_999]) {
      const a = fuzzInput(entries, 5, index);
      const b = fuzzInput(entries, 5, index);
      expect(b.ops).toEqual(a.ops);
      expect(Buffer.from(b.bytes).equals(Buffer.from(a.bytes))).toBe(true);
    }
  }, 120_000);

  it("seeds the corpus from every fixture arch/variant in both layouts, vision ones with their tower (Ollama) and mmproj (native), and the quantized fixtures", async () => {
    const names = new Set((await corpus()).map((e) => e.name));
    const variants = allFixtureVariants();
    expect(variants.filter((v) => v.vision).length).toBeGreaterThan(0);
    for (const { arch, variant, vision } of variants) {
      expect(names.has(`${arch}/${variant}/ollama`)).toBe(true);
      expect(names.has(`${arch}/${variant}/native`)).toBe(true);
      if (vision) expect(names.has(`${arch}/${variant}/native/mmproj`), `${arch}/${variant}`).toBe(true);
    }
    // and the quantized ones, as Ollama ships them and as llama-quantize makes their twins
    for (const c of quantizedFixtureVariants()) {
      for (const layout of ["ollama", "native"]) expect(names.has(`${c.arch}/${c.variant}/${layout}/${c.quant}${c.bf16Towers ? "/bf16towers" : ""}`)).toBe(true);
    }
  }, 120_000);

  it("the header scanner finds every record of a fixture", async () => {
    const f = generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "1b" });
    const bytes = await serializeGguf(f.text);
    const map = scanHeader(bytes);
    expect(map.kvStarts.length - 1).toBe(f.text.kvs().length);
    expect(map.tensorStarts.length - 1).toBe(f.text.tensors.length);
    expect(map.fields.tensorOffset).toHaveLength(f.text.tensors.length);
  });
});
