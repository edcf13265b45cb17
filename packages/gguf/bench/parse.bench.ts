// Metadata parse of a large-vocabulary header: @compat/gguf vs @huggingface/gguf on the same
// file in the same run, plus our header write. Prints medians and ratios (no thresholds).
import { gguf as hfGguf } from "@huggingface/gguf";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { GgufValueType, layoutGguf, readGguf, writeGguf } from "../src/index";
import { MERGES, VOCAB, buildModel } from "./vocab-fixture";

const RUNS = Number(process.env.BENCH_RUNS ?? 7);

interface Stats {
  median: number;
  min: number;
}

/** Run `fn` once to warm up, then `runs` times; wall-clock median and minimum in ms. */
async function measure(fn: () => Promise<unknown> | unknown, runs = RUNS): Promise<Stats> {
  await fn();
  const ts: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await fn();
    ts.push(performance.now() - t0);
  }
  ts.sort((a, b) => a - b);
  return { median: ts[Math.floor(ts.length / 2)]!, min: ts[0]! };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "gguf-bench-"));
  try {
    const path = join(dir, "vocab.gguf");
    const built = buildModel();
    const { layout } = await writeGguf(built, path);
    const size = (await stat(path)).size;
    console.log(`file: ${VOCAB} tokens + scores + token_type, ${MERGES} merges, ${built.tensors.length} tensor infos; header ${(layout.dataOffset / 1e6).toFixed(1)} MB, file ${(size / 1e6).toFixed(1)} MB; wall-clock ms over ${RUNS}-${RUNS * 2} runs (5 for @huggingface/gguf)\n`);

    const hfRuns = Math.max(3, Math.min(RUNS, 5));
    const hf = await measure(() => hfGguf(path, { allowLocalFile: true }), hfRuns);
    const ours = await measure(async () => {
      const m = await readGguf(path);
      await m.close();
    }, RUNS * 2);
    const oursDecoded = await measure(async () => {
      const m = await readGguf(path);
      m.getStringArray("tokenizer.ggml.tokens");
      m.getStringArray("tokenizer.ggml.merges");
      await m.close();
    });
    const parsed = await readGguf(path);
    const writeParsed = await measure(() => layoutGguf(parsed), RUNS * 2);
    const writeBuilt = await measure(() => layoutGguf(built));
    // The realistic edit: vocabulary arrays re-set from decoded strings (e.g. tokens appended).
    const edited = parsed.clone();
    for (const key of ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"]) edited.setArray(key, GgufValueType.STRING, edited.getStringArray(key));
    const writeEdited = await measure(() => layoutGguf(edited));
    const writeFile = await measure(() => writeGguf(parsed, join(dir, "out.gguf")));
    await parsed.close();

    const x = (a: Stats, b: Stats) => `${(a.median / b.median).toFixed(1)}x (min ${(a.min / b.min).toFixed(1)}x)`;
    const rows: [string, Stats, string][] = [
      ["@huggingface/gguf 0.4.6 parse (file)", hf, "baseline"],
      ["@compat/gguf parse (file)", ours, `${x(hf, ours)} faster than @huggingface/gguf`],
      ["@compat/gguf parse + decode all tokens & merges", oursDecoded, `${x(hf, oursDecoded)} faster than @huggingface/gguf`],
      ["@compat/gguf header write (the parsed model)", writeParsed, `${x(ours, writeParsed)} the parse speed`],
      ["@compat/gguf header write (vocab re-set from decoded strings)", writeEdited, `${x(ours, writeEdited)} the parse speed`],
      ["@compat/gguf header write (vocab built by string concatenation)", writeBuilt, `${x(ours, writeBuilt)} the parse speed`],
      ["@compat/gguf writeGguf to a file (atomic, fsync)", writeFile, ""],
    ];
    const w = Math.max(...rows.map((r) => r[0].length));
    console.log(`${"case".padEnd(w)}  ${"median ms".padStart(10)}  ${"min ms".padStart(9)}  ratio (median, min)`);
    for (const [name, st, note] of rows) console.log(`${name.padEnd(w)}  ${st.median.toFixed(2).padStart(10)}  ${st.min.toFixed(2).padStart(9)}  ${note}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
