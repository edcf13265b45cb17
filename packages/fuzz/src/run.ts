/** The fuzz loop: inputs [start, start + count) of a seeded run, with per-input time and memory. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { CorpusEntry } from "./corpus";
import { fuzzInput } from "./mutate";
import { FuzzFailure, fullPipeline, parseOnly, type Outcome } from "./target";

export interface FuzzOptions {
  readonly corpus: readonly CorpusEntry[];
  readonly seed: number;
  readonly count: number;
  readonly start?: number;
  /** Every input whose number is a multiple of this goes through the full pipeline; the rest are parsed only (1 = all full). */
  readonly fullEvery: number;
  /** Called before each input (the watchdog of scripts/fuzz.ts records it). */
  readonly onInput?: (index: number) => void;
  /** Called every 1000 inputs. */
  readonly onProgress?: (stats: FuzzStats) => void;
}

export interface FuzzFailureRecord {
  readonly index: number;
  readonly entry: string;
  readonly ops: readonly string[];
  readonly stage: string;
  readonly message: string;
}

export interface FuzzStats {
  inputs: number;
  full: number;
  outcomes: Record<string, number>;
  /** The first 200 failures. */
  failures: FuzzFailureRecord[];
  failureCount: number;
  /** Slowest input (ms) and which. */
  maxMs: number;
  maxMsIndex: number;
  /** Inputs over one second. */
  slow: number[];
  /** Largest growth of heap + array buffers seen right after an input, over the level before it (bytes). */
  maxMemGrowth: number;
  maxMemGrowthIndex: number;
  /** Largest resident set size seen (bytes). */
  maxRss: number;
}

const memNow = () => {
  const m = process.memoryUsage();
  return { live: m.heapUsed + m.arrayBuffers, rss: m.rss };
};

export async function runFuzz(opts: FuzzOptions): Promise<FuzzStats> {
  const start = opts.start ?? 0;
  const stats: FuzzStats = { inputs: 0, full: 0, outcomes: {}, failures: [], failureCount: 0, maxMs: 0, maxMsIndex: -1, slow: [], maxMemGrowth: 0, maxMemGrowthIndex: -1, maxRss: 0 };
  const tmp = await mkdtemp(join(tmpdir(), "compat-fuzz-"));
  try {
    for (let index = start; index < start + opts.count; index++) {
      opts.onInput?.(index);
      const input = fuzzInput(opts.corpus, opts.seed, index);
      const name = `fuzz-${opts.seed}-${index}.gguf`;
      const full = index % opts.fullEvery === 0;
      const before = memNow();
      const t0 = performance.now();
      let outcome: Outcome;
      try {
        outcome = full ? await fullPipeline(input.bytes, name, { tmpDir: tmp, seed: opts.seed, index }) : parseOnly(input.bytes, name);
      } catch (e) {
        const f = e instanceof FuzzFailure ? e : new FuzzFailure("harness", e);
        stats.failureCount++;
        if (stats.failures.length < 200) stats.failures.push({ index, entry: input.entry, ops: input.ops, stage: f.stage, message: f.message });
        outcome = "error:FAILURE";
      }
      const ms = performance.now() - t0;
      const after = memNow();
      stats.inputs++;
      if (full) stats.full++;
      const key = `${full ? "full" : "parse"}:${outcome}`;
      stats.outcomes[key] = (stats.outcomes[key] ?? 0) + 1;
      if (ms > stats.maxMs) [stats.maxMs, stats.maxMsIndex] = [ms, index];
      if (ms > 1000) stats.slow.push(index);
      const growth = after.live - before.live;
      if (growth > stats.maxMemGrowth) [stats.maxMemGrowth, stats.maxMemGrowthIndex] = [growth, index];
      if (after.rss > stats.maxRss) stats.maxRss = after.rss;
      if (stats.inputs % 1000 === 0) opts.onProgress?.(stats);
      // a turn of the event loop every 100 inputs: parse-only inputs (and full ones refused before
      // any I/O) never leave it otherwise, and a caller's timers and I/O (a test runner's RPC, whose
      // 60 s timer fires if its answer waits behind a long synchronous stretch) must not starve
      if (stats.inputs % 100 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return stats;
}
