/**
 * npm run fuzz -- [--count N] [--seed S] [--start I] [--full-every K] [--json FILE]
 *
 * Mutates the testkit corpus (every fixture arch/variant in both layouts) and runs each
 * input through parse, and every K-th input through the full pipeline (detect, translate,
 * view reads, atomic write, clip view when present). See packages/fuzz/src.
 * The inputs run in a child process watched from here: an input still running after 10 s
 * is a hang, a child that dies (out of memory: 1 GiB heap cap) is a failure; either way the
 * input is recorded and the run goes on from the next one. Exit status 1 if anything failed.
 */
import { fork } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildFuzzCorpus, runFuzz, type FuzzFailureRecord, type FuzzStats } from "@compat/fuzz";

interface Job {
  seed: number;
  start: number;
  count: number;
  fullEvery: number;
  /** File the child writes the number of the input it is on into (4 bytes, little-endian). */
  current: string;
}

if (process.env.COMPAT_FUZZ_CHILD === "1") {
  const job = JSON.parse(process.argv[2]!) as Job;
  const fd = openSync(job.current, "r+");
  const buf = Buffer.alloc(4);
  const corpus = await buildFuzzCorpus();
  const stats = await runFuzz({
    corpus,
    seed: job.seed,
    start: job.start,
    count: job.count,
    fullEvery: job.fullEvery,
    onInput: (i) => {
      buf.writeInt32LE(i);
      writeSync(fd, buf, 0, 4, 0);
    },
    onProgress: (s) => process.send!({ progress: s }),
  });
  closeSync(fd);
  process.send!({ done: stats }, undefined, {}, () => process.exit(0));
} else {
  const arg = (name: string, dflt: number) => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? Number(process.argv[i + 1]) : dflt;
  };
  const jsonAt = process.argv.indexOf("--json");
  const seed = arg("seed", 1);
  const start = arg("start", 0);
  const count = arg("count", 10_000);
  const fullEvery = arg("full-every", 10);
  const HANG_MS = 10_000;
  const t0 = Date.now();
  const total: FuzzStats = { inputs: 0, full: 0, outcomes: {}, failures: [], failureCount: 0, maxMs: 0, maxMsIndex: -1, slow: [], maxMemGrowth: 0, maxMemGrowthIndex: -1, maxRss: 0 };
  const merge = (s: FuzzStats) => {
    total.inputs += s.inputs;
    total.full += s.full;
    for (const [k, v] of Object.entries(s.outcomes)) total.outcomes[k] = (total.outcomes[k] ?? 0) + v;
    total.failures.push(...s.failures);
    total.failureCount += s.failureCount;
    total.slow.push(...s.slow);
    if (s.maxMs > total.maxMs) [total.maxMs, total.maxMsIndex] = [s.maxMs, s.maxMsIndex];
    if (s.maxMemGrowth > total.maxMemGrowth) [total.maxMemGrowth, total.maxMemGrowthIndex] = [s.maxMemGrowth, s.maxMemGrowthIndex];
    total.maxRss = Math.max(total.maxRss, s.maxRss);
  };
  const killed: FuzzFailureRecord[] = [];
  /** Inputs run by children that were killed, after their last stats snapshot (outcomes unknown). */
  let unknown = 0;

  const scratch = mkdtempSync(join(tmpdir(), "compat-fuzz-watch-"));
  const currentFile = join(scratch, "current");

  /** Runs [from, end) in one child; resolves with the index to continue from. */
  const runChild = (from: number, end: number, onDone: (s: FuzzStats) => void = merge) =>
    new Promise<number>((resolve) => {
      writeFileSync(currentFile, Buffer.from(new Int32Array([-1]).buffer));
      const readCurrent = () => readFileSync(currentFile).readInt32LE(0);
      const job: Job = { seed, start: from, count: end - from, fullEvery, current: currentFile };
      const child = fork(fileURLToPath(import.meta.url), [JSON.stringify(job)], {
        execArgv: ["--import", "tsx", "--max-old-space-size=1024"],
        env: { ...process.env, COMPAT_FUZZ_CHILD: "1", TMPDIR: scratch }, // a killed child's temp dir goes with the scratch dir
        stdio: ["ignore", "inherit", "inherit", "ipc"],
      });
      let last = -1;
      let since = Date.now();
      let settled = false;
      const finish = (next: number) => {
        if (settled) return;
        settled = true;
        clearInterval(watch);
        resolve(next);
      };
      const watch = setInterval(() => {
        const i = readCurrent();
        if (i !== last) [last, since] = [i, Date.now()];
        else if (i >= 0 && Date.now() - since > HANG_MS) {
          killed.push({ index: i, entry: "?", ops: [], stage: "hang", message: `still running after ${HANG_MS} ms` });
          process.stderr.write(`fuzz: input ${i} hangs (still running after ${HANG_MS} ms)\n`);
          child.kill("SIGKILL");
          died(i + 1);
        }
      }, 250);
      // the latest snapshot of the child's stats: kept if the child has to be killed
      let snapshot: FuzzStats | undefined;
      child.on("message", (m: { progress?: FuzzStats; done?: FuzzStats }) => {
        if (m.done) {
          onDone(m.done);
          finish(end);
        } else if (m.progress !== undefined) {
          snapshot = m.progress;
          if (m.progress.inputs % 50_000 === 0) {
            process.stderr.write(`fuzz: ${total.inputs + m.progress.inputs} inputs, ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
          }
        }
      });
      const died = (next: number) => {
        // the inputs since the last snapshot count as run, their outcomes are unknown
        if (onDone === merge) {
          if (snapshot) merge(snapshot);
          unknown += next - from - (snapshot?.inputs ?? 0);
        }
        finish(next);
      };
      child.on("exit", (code, signal) => {
        if (settled) return;
        const i = readCurrent();
        if (i < 0) {
          // died before its first input: a broken harness, not a finding
          process.stderr.write(`fuzz: the fuzzing process exited (${signal ?? code}) before its first input\n`);
          process.exit(2);
        }
        killed.push({ index: i, entry: "?", ops: [], stage: "crash", message: `process exited (${signal ?? code}) during this input` });
        process.stderr.write(`fuzz: input ${i} crashed the fuzzing process (${signal ?? code})\n`);
        died(i + 1);
      });
    });

  let next = start;
  while (next < start + count) next = await runChild(next, start + count);
  total.inputs += unknown;
  // An input over 1 s on a busy machine may have been waiting for the CPU or a GC: time it
  // again alone in a fresh process; only inputs still over 1 s count.
  const retimed: Record<number, number> = {};
  for (const i of total.slow.slice(0, 50)) await runChild(i, i + 1, (s) => void (retimed[i] = Math.round(s.maxMs)));
  const slowAlone = Object.entries(retimed).filter(([, ms]) => ms > 1000).map(([i]) => Number(i));
  rmSync(scratch, { recursive: true, force: true });
  total.failures.push(...killed);
  total.failureCount += killed.length;
  const seconds = (Date.now() - t0) / 1000;
  const summary = {
    seed,
    start,
    count,
    fullEvery,
    inputs: total.inputs,
    fullPipeline: total.full,
    inputsWithUnknownOutcome: unknown,
    seconds: Math.round(seconds),
    failureCount: total.failureCount,
    failures: total.failures,
    slowInputs: total.slow,
    slowInputsRetimedAloneMs: retimed,
    maxMs: Math.round(total.maxMs),
    maxMsIndex: total.maxMsIndex,
    maxMemGrowthMiB: +(total.maxMemGrowth / 2 ** 20).toFixed(1),
    maxMemGrowthIndex: total.maxMemGrowthIndex,
    maxRssMiB: Math.round(total.maxRss / 2 ** 20),
    outcomes: Object.fromEntries(Object.entries(total.outcomes).sort((a, b) => b[1] - a[1])),
  };
  const text = JSON.stringify(summary, null, 2);
  if (jsonAt >= 0) writeFileSync(process.argv[jsonAt + 1]!, text + "\n");
  process.stdout.write(text + "\n");
  process.exitCode = total.failureCount + slowAlone.length > 0 ? 1 : 0;
}
