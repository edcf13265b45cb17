// Crash safety of the translation cache as the bridge fills it: a real process (prepare-child.ts,
// the bridge's prepareModel into a TranslationCache) translating a model of an Ollama store built
// by the testkit, SIGKILLed at seeded random moments. After every kill: no entry is partial or
// invalid (each present entry is byte-identical to a clean run's), every leftover (staging
// directory, lock) belongs to a killed process; every run that completes serves the clean bytes
// and leaves no leftover of any dead process; the store's blob is never modified.
// COMPAT_CRASH_RUNS sets the number of kills (default 50).
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Prng, fileDigest, generateFixture, guardSource, writeWithZeroTail } from "@compat/testkit";
import { buildOllamaStore, ModelStore } from "@compat/store";

const script = fileURLToPath(new URL("./prepare-child.ts", import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
const RUNS = Number(process.env.COMPAT_CRASH_RUNS ?? 50);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const list = (d: string) => readdir(d).catch(() => [] as string[]);

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-bridge-crash-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** An Ollama gemma3 file with a 64 MiB zero tensor appended (a hole on disk), so the cache write takes a while. */
async function bigGemma(path: string): Promise<void> {
  const f = generateFixture("gemma3", { seed: 5, layout: "ollama", variant: "1b" });
  await writeWithZeroTail(f.text, path, 64 * 2 ** 20);
}

function prepare(root: string, cacheDir: string) {
  const child = spawn(process.execPath, ["--import", tsx, script, root, "big:1", cacheDir], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  let running = true;
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on("close", (code, signal) => {
      running = false;
      r({ code, signal });
    }),
  );
  return { child, done, running: () => running, result: () => JSON.parse(out) as { hit: boolean; path: string }, stderr: () => err };
}

/** The writer pid in a staging directory's name (`tmp/.<key>.<pid>.<hex>.tmp`, @compat/gguf's temp naming). */
const stagingPid = (name: string): number => Number(name.split(".")[2]);

/** Until a file in `pid`'s staging directory has bytes; false if the child ended first. */
async function untilWriting(cacheDir: string, pid: number, running: () => boolean): Promise<boolean> {
  while (running()) {
    for (const d of await list(join(cacheDir, "tmp"))) {
      if (stagingPid(d) !== pid) continue;
      for (const f of await list(join(cacheDir, "tmp", d))) {
        if ((await stat(join(cacheDir, "tmp", d, f)).then((s) => s.size, () => 0)) > 0) return true;
      }
    }
    await sleep(2);
  }
  return false;
}

/** Pids that own leftovers: staging directories and lock files. */
async function leftoverPids(cacheDir: string): Promise<number[]> {
  const pids = (await list(join(cacheDir, "tmp"))).map((d) => stagingPid(d));
  // a lock holds its owner's identity as JSON ({"pid": …, "start": …})
  for (const l of await list(join(cacheDir, "locks"))) pids.push((JSON.parse((await readFile(join(cacheDir, "locks", l), "utf8").catch(() => "")) || "{}") as { pid?: number }).pid ?? NaN);
  return pids;
}

describe("SIGKILL of the bridge while it fills the cache", () => {
  it(`${RUNS} runs SIGKILLed at seeded moments (seed 15): no partial or invalid entry is ever there or served, the next completed run leaves no leftover`, async () => {
    const src = join(dir, "big.gguf");
    await bigGemma(src);
    const root = join(dir, "store");
    await buildOllamaStore(root, [{ name: "big:1", model: src }]);
    const blob = (await new ModelStore(root).resolve("big:1")).modelPath;
    const guard = await guardSource(blob);

    // a clean run: the entry's bytes, and how long its write takes
    const cleanDir = join(dir, "clean-cache");
    const clean = prepare(root, cleanDir);
    await untilWriting(cleanDir, clean.child.pid!, clean.running);
    const t0 = Date.now();
    expect((await clean.done).code, clean.stderr()).toBe(0);
    const writeMs = Date.now() - t0;
    const cleanDigest = await fileDigest(clean.result().path);
    const cleanSize = (await stat(clean.result().path)).size;

    const cacheDir = join(dir, "cache");
    const entries = join(cacheDir, "entries");
    const rng = new Prng(15);
    const killed = new Set<number>();
    const landed = { early: 0, writing: 0, finished: 0 };
    /** Completed runs that found a dead writer's leftovers and removed them. */
    let cleanedUp = 0;
    const t1 = Date.now();
    for (let run = 0; run < RUNS; run++) {
      // three runs in four find no entry (evicted, or never written) and write one
      if (rng.next() < 0.75) await rm(entries, { recursive: true, force: true });
      const leftBefore = (await leftoverPids(cacheDir)).length;
      const p = prepare(root, cacheDir);
      if (rng.next() < 0.2) await sleep(rng.int(2500)); // start-up, store lookup, header, translation, lock
      else if (await untilWriting(cacheDir, p.child.pid!, p.running)) await sleep(rng.int(Math.ceil(writeMs * 0.9))); // the write, its rename, the unlock
      const writing = (await list(join(cacheDir, "tmp"))).some((d) => stagingPid(d) === p.child.pid);
      p.child.kill("SIGKILL");
      const r = await p.done;
      if (r.signal === "SIGKILL") {
        killed.add(p.child.pid!);
        if (writing) landed.writing++;
        else landed.early++;
      } else {
        landed.finished++;
        expect(r.code, p.stderr()).toBe(0);
        // a completed run serves the clean bytes and has swept every dead writer's leftovers
        expect(await fileDigest(p.result().path)).toBe(cleanDigest);
        expect(await leftoverPids(cacheDir)).toEqual([]);
        if (leftBefore > 0) cleanedUp++;
      }
      // never a partial or invalid entry
      for (const key of await list(entries)) {
        const model = join(entries, key, "model.gguf");
        expect((await stat(model)).size).toBe(cleanSize);
        expect(await fileDigest(model)).toBe(cleanDigest);
        expect(JSON.parse(await readFile(join(entries, key, "entry.json"), "utf8"))).toMatchObject({ key, size: cleanSize });
      }
      for (const pid of await leftoverPids(cacheDir)) expect(killed).toContain(pid);
    }
    const loopMs = Date.now() - t1;
    console.log(`bridge cache SIGKILL: ${RUNS} runs in ${(loopMs / 1000).toFixed(0)} s: ${landed.writing} mid-write, ${landed.early} before the write, ${landed.finished} completed (${cleanedUp} of them after removing a killed writer's leftovers)`);
    expect(landed.writing).toBeGreaterThan(0);

    // the next run completes, serves the clean bytes and leaves nothing behind
    const hadLeftovers = (await leftoverPids(cacheDir)).length;
    const last = prepare(root, cacheDir);
    expect((await last.done).code, last.stderr()).toBe(0);
    expect(await fileDigest(last.result().path)).toBe(cleanDigest);
    expect(await list(join(cacheDir, "tmp"))).toEqual([]);
    expect(await list(join(cacheDir, "locks"))).toEqual([]);
    expect(await list(entries)).toHaveLength(1);
    console.log(`the final run removed the leftovers of ${hadLeftovers} killed writer(s)`);
    await guard.assertUnchanged();
  }, 1_800_000);
});
