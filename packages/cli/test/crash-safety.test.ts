// Crash safety of `ollama-compat translate` as a real process: SIGKILL at seeded random
// moments, a file system that fills up, a source truncated or deleted while it is read,
// and eight translations racing for one output. The destination is always absent or
// complete (identical to a clean run), temp files never outlive the next run, and the
// source is never modified (its digest is checked after every scenario).
import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, truncate, unlink, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGguf } from "@compat/gguf";
import { Prng, fileDigest, generateFixture, guardSource, writeFixture, type SourceGuard } from "@compat/testkit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bin, collect, exited, tsx, withZeroTensor } from "./helpers";

const translate = (src: string, out: string, shell?: string) =>
  shell === undefined
    ? spawn(process.execPath, ["--import", tsx, bin, "translate", src, "-o", out], { stdio: ["ignore", "pipe", "pipe"] })
    : spawn("bash", ["-c", `${shell}; exec "$@"`, "bash", process.execPath, "--import", tsx, bin, "translate", src, "-o", out], { stdio: ["ignore", "pipe", "pipe"] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const temps = async (d: string) => (await readdir(d)).filter((e) => e.endsWith(".tmp"));
/** The pid in a temp name `.out.gguf.PID.HEX.tmp`. */
const tempPid = (name: string) => Number(/\.(\d+)\.[0-9a-f]+\.tmp$/.exec(name)?.[1]);

/** Until `pid`'s temp file in `d` has at least `bytes` bytes, or the child is gone. */
async function untilWriting(d: string, pid: number, running: () => boolean, bytes = 1): Promise<boolean> {
  while (running()) {
    for (const e of await temps(d)) {
      if (tempPid(e) !== pid) continue;
      const size = await stat(join(d, e)).then((s) => s.size, () => 0);
      if (size >= bytes) return true;
    }
    await sleep(2);
  }
  return false;
}

let dir: string;
let small: string;

/** The Ollama-format llama fixture with a zero tensor of `size` bytes appended (sparse on disk). */
const withBigTensor = (name: string, size: number): Promise<string> => withZeroTensor(small, dir, name, size);

/** A clean run's output: digest and size. */
async function cleanRun(src: string): Promise<{ digest: string; size: number; writeMs: number }> {
  const outDir = await mkdtemp(join(dir, "clean-"));
  const out = join(outDir, "out.gguf");
  const child = translate(src, out);
  const err = collect(child.stderr);
  let running = true;
  const done = exited(child).then((r) => ((running = false), r));
  await untilWriting(outDir, child.pid!, () => running);
  const t0 = Date.now();
  const r = await done;
  const writeMs = Date.now() - t0;
  if (r.code !== 0) throw new Error(`clean run failed: ${err()}`);
  const result = { digest: await fileDigest(out), size: (await stat(out)).size, writeMs };
  await rm(outDir, { recursive: true });
  return result;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-cli-crash-"));
  small = (await writeFixture(generateFixture("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" }), dir)).text;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("SIGKILL at random moments", () => {
  it("50 kills (seed 15): the output is absent or identical to a clean run's, the next run cleans up and completes", async () => {
    const src = await withBigTensor("kill", 64 * 1024 * 1024);
    const guard = await guardSource(src);
    const clean = await cleanRun(src);
    const outDir = await mkdtemp(join(dir, "kill-"));
    const out = join(outDir, "out.gguf");
    const rng = new Prng(15);
    const killedPids = new Set<number>();
    const landed = { startup: 0, writing: 0, finished: 0 };
    for (let run = 0; run < 50; run++) {
      if (rng.next() < 0.5) await rm(out, { force: true }); // half the runs start without an earlier output
      const child = translate(src, out);
      let running = true;
      const done = exited(child).then((r) => ((running = false), r));
      if (rng.next() < 0.2) {
        await sleep(rng.int(1500)); // anywhere from process start (startup, header parse, translation)
      } else {
        await untilWriting(outDir, child.pid!, () => running);
        await sleep(rng.int(Math.ceil(clean.writeMs * 0.7))); // somewhere in the write (its end includes fsync and exit)
      }
      const writing = (await temps(outDir)).some((e) => tempPid(e) === child.pid);
      child.kill("SIGKILL");
      const r = await done;
      if (r.signal !== "SIGKILL") landed.finished++;
      else {
        killedPids.add(child.pid!);
        if (writing) landed.writing++;
        else landed.startup++;
      }
      // never a partial destination
      if (existsSync(out)) {
        expect((await stat(out)).size).toBe(clean.size);
        expect(await fileDigest(out)).toBe(clean.digest);
      }
      // leftovers are only killed runs' temp files (each run removes the dead ones it finds)
      for (const e of await temps(outDir)) expect(killedPids).toContain(tempPid(e));
    }
    console.log(`SIGKILL: ${landed.writing} mid-write, ${landed.startup} before the write, ${landed.finished} after completion`);
    expect(landed.writing).toBeGreaterThan(0);
    const again = translate(src, out);
    expect((await exited(again)).code).toBe(0);
    expect(await readdir(outDir)).toEqual(["out.gguf"]);
    expect(await fileDigest(out)).toBe(clean.digest);
    await guard.assertUnchanged();
  }, 900_000);
});

describe("the output's file system fills up", () => {
  async function expectCleanFailure(src: string, guard: SourceGuard, outDir: string, shell?: string): Promise<string> {
    const out = join(outDir, "out.gguf");
    const child = translate(src, out, shell);
    const err = collect(child.stderr);
    const { code } = await exited(child);
    expect(code).toBe(1);
    expect(err().trim().split("\n")).toHaveLength(1);
    expect(err()).toContain(out);
    expect(await readdir(outDir)).toEqual([]);
    await guard.assertUnchanged();
    return err();
  }

  it("a 4 MiB tmpfs (mounted as root): one line naming the output, no temp file, and the space is free again", async (ctx) => {
    const mnt = join(dir, "tmpfs");
    await mkdir(mnt);
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], { stdio: "ignore" });
    } catch {
      ctx.skip(); // not root or no mount permission: the RLIMIT_FSIZE test below still runs
    }
    try {
      const src = await withBigTensor("fill", 8 * 1024 * 1024);
      const guard = await guardSource(src);
      const msg = await expectCleanFailure(src, guard, mnt);
      expect(msg).toMatch(/no space left on the device/);
      // the failed temp file is gone, so a translation that fits (85 kB) succeeds on the same file system
      const tiny = (await writeFixture(generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "1b" }), dir)).text;
      const child = translate(tiny, join(mnt, "small.gguf"));
      expect((await exited(child)).code).toBe(0);
      expect(await readdir(mnt)).toEqual(["small.gguf"]);
    } finally {
      execFileSync("umount", [mnt]);
    }
  }, 300_000);

  it("a file size limit (ulimit -f, EFBIG; needs no privileges): the same", async () => {
    const src = await withBigTensor("fsize", 8 * 1024 * 1024);
    const guard = await guardSource(src);
    const outDir = await mkdtemp(join(dir, "fsize-"));
    const msg = await expectCleanFailure(src, guard, outDir, "ulimit -f 4096");
    expect(msg).toMatch(/file too large/i);
  }, 300_000);

  it("text and projector are written at once: the text failing stops the run, no temp file of either is left, and the projector is absent or complete", async () => {
    const vision = (await writeFixture(generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "4b-vision" }), await mkdtemp(join(dir, "vision-src-")))).text;
    const src = await withZeroTensor(vision, dir, "vision-fsize", 8 * 1024 * 1024);
    const guard = await guardSource(src);
    const outDir = await mkdtemp(join(dir, "vision-fsize-"));
    const out = join(outDir, "out.gguf");
    const mmproj = join(outDir, "proj.gguf");
    const child = spawn("bash", ["-c", 'ulimit -f 4096; exec "$@"', "bash", process.execPath, "--import", tsx, bin, "translate", src, "-o", out, "--mmproj", mmproj], { stdio: ["ignore", "pipe", "pipe"] });
    const err = collect(child.stderr);
    expect((await exited(child)).code).toBe(1);
    expect(err().trim().split("\n")).toHaveLength(1);
    expect(err()).toContain(out);
    expect(err()).toMatch(/file too large/i);
    const left = await readdir(outDir);
    expect(left.filter((e) => e !== "proj.gguf")).toEqual([]);
    // the projector is small: it may have been complete before the text failed (each output is atomic)
    if (left.includes("proj.gguf")) {
      const m = await readGguf(mmproj);
      expect(m.getString("general.architecture")).toBe("clip");
      await m.close();
    }
    await guard.assertUnchanged();
  }, 300_000);
});

describe("a source that changes while it is read", () => {
  let src: string;
  let clean: { digest: string; size: number };
  beforeAll(async () => {
    src = await withBigTensor("shrink", 512 * 1024 * 1024);
    clean = await cleanRun(src);
  }, 600_000);

  it("truncated mid-read: one line naming the source, no output, no temp file", async () => {
    const copy = join(dir, "shrinking.gguf");
    execFileSync("cp", ["--sparse=always", src, copy]);
    const outDir = await mkdtemp(join(dir, "shrink-"));
    const out = join(outDir, "out.gguf");
    const child = translate(copy, out);
    const err = collect(child.stderr);
    let running = true;
    const done = exited(child).then((r) => ((running = false), r));
    expect(await untilWriting(outDir, child.pid!, () => running, 1 << 20)).toBe(true);
    await truncate(copy, 1 << 20); // cut into the tensor data
    const { code } = await done;
    expect(code).toBe(1);
    expect(err().trim().split("\n")).toHaveLength(1);
    expect(err()).toContain(copy);
    expect(err()).toMatch(/TRUNCATED|file ended/);
    expect(await readdir(outDir)).toEqual([]);
  }, 300_000);

  it("deleted mid-read: the open file is read to its end and the output is complete", async () => {
    const copy = join(dir, "deleted.gguf");
    execFileSync("cp", ["--sparse=always", src, copy]);
    const outDir = await mkdtemp(join(dir, "deleted-"));
    const out = join(outDir, "out.gguf");
    const child = translate(copy, out);
    let running = true;
    const done = exited(child).then((r) => ((running = false), r));
    expect(await untilWriting(outDir, child.pid!, () => running, 1 << 20)).toBe(true);
    await unlink(copy);
    expect((await done).code).toBe(0);
    expect(await readdir(outDir)).toEqual(["out.gguf"]);
    expect(await fileDigest(out)).toBe(clean.digest);
  }, 300_000);
});

describe("concurrent launches", () => {
  it("8 translations to the same output at once: all succeed, the result is a single run's, no temp file is left", async () => {
    const src = await withBigTensor("race", 16 * 1024 * 1024);
    const guard = await guardSource(src);
    const clean = await cleanRun(src);
    const outDir = await mkdtemp(join(dir, "race-"));
    const out = join(outDir, "out.gguf");
    const children = Array.from({ length: 8 }, () => {
      const child = translate(src, out);
      return { err: collect(child.stderr), done: exited(child) };
    });
    for (const c of children) expect({ ...(await c.done), err: c.err() }).toEqual({ code: 0, signal: null, err: "" });
    expect(await readdir(outDir)).toEqual(["out.gguf"]);
    expect(await fileDigest(out)).toBe(clean.digest);
    await guard.assertUnchanged();
  }, 600_000);
});
