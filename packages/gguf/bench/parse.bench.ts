// Metadata parse of a large-vocabulary header: @compat/gguf vs @huggingface/gguf on the same
// file in the same run, plus our header write. Prints medians and ratios (no thresholds).
import { gguf as hfGguf } from "@huggingface/gguf";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { layoutGguf, readGguf, writeGguf } from "../src/index";
import { MERGES, VOCAB, buildModel } from "./vocab-fixture";

const RUNS = Number(process.env.BENCH_RUNS ?? 7);

async function time(fn: () => Promise<unknown> | unknown): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function median(fn: () => Promise<unknown> | unknown, runs = RUNS): Promise<number> {
  await fn(); // warm-up
  const ts: number[] = [];
  for (let i = 0; i < runs; i++) ts.push(await time(fn));
  ts.sort((a, b) => a - b);
  return ts[Math.floor(ts.length / 2)]!;
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "gguf-bench-"));
  try {
    const path = join(dir, "vocab.gguf");
    const built = buildModel();
    const { layout } = await writeGguf(built, path);
    const size = (await stat(path)).size;
    console.log(`file: ${VOCAB} tokens + scores + token_type, ${MERGES} merges, ${built.tensors.length} tensor infos; header ${(layout.dataOffset / 1e6).toFixed(1)} MB, file ${(size / 1e6).toFixed(1)} MB; median of ${RUNS} runs\n`);

    const ours = await median(async () => {
      const m = await readGguf(path);
      await m.close();
    });
    const oursDecoded = await median(async () => {
      const m = await readGguf(path);
      m.getStringArray("tokenizer.ggml.tokens");
      m.getStringArray("tokenizer.ggml.merges");
      await m.close();
    }, Math.min(RUNS, 5));
    const hf = await median(() => hfGguf(path, { allowLocalFile: true }), Math.min(RUNS, 5));

    const parsed = await readGguf(path);
    const writeParsed = await median(() => layoutGguf(parsed));
    const writeBuilt = await median(() => layoutGguf(built));
    const writeFile = await median(() => writeGguf(parsed, join(dir, "out.gguf")), Math.min(RUNS, 5));
    await parsed.close();

    const rows: [string, number, string][] = [
      ["@huggingface/gguf 0.4.6 parse (file)", hf, "baseline"],
      ["@compat/gguf parse (file)", ours, `${(hf / ours).toFixed(1)}x faster than HF`],
      ["@compat/gguf parse + decode all tokens & merges", oursDecoded, `${(hf / oursDecoded).toFixed(1)}x faster than HF`],
      ["@compat/gguf header write (parsed model)", writeParsed, `${(ours / writeParsed).toFixed(1)}x the parse speed`],
      ["@compat/gguf header write (model built from JS strings)", writeBuilt, `${(ours / writeBuilt).toFixed(2)}x the parse speed`],
      ["@compat/gguf writeGguf to file (atomic, fsync)", writeFile, ""],
    ];
    const w = Math.max(...rows.map((r) => r[0].length));
    console.log(`${"case".padEnd(w)}  ${"median ms".padStart(10)}  ratio`);
    for (const [name, ms, note] of rows) console.log(`${name.padEnd(w)}  ${ms.toFixed(2).padStart(10)}  ${note}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
