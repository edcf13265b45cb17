// The daemon's memory stays flat while libfuse's worker threads come and go: the 1 MiB read
// buffers are a pool made once, not one per worker (a worker's used to stay after it, and later
// to fault in as far as its reads reached). And over many cold reads its workers stay (none
// started and retired per read) and its memory with them: after one read as after twenty.
import { execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { ComputedPart, FilePlan } from "@compat/mount";
import { tempDirs } from "./helpers";
import { fileDigest } from "@compat/testkit";

const t = tempDirs();

/** The largest read the daemon serves, its read buffer's size (MAX_READ in native/mountd.c). */
const MAX_READ = 1 << 20;
/** The daemon's worker threads at most. */
const THREADS = 8;
/** Its threads besides the workers: main, the controller channel, the inotify watch. */
const OTHER_THREADS = 3;

/** Resident memory of a process, in bytes (VmRSS). */
async function rss(pid: number): Promise<number> {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(await readFile(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

const threadsOf = async (pid: number) => (await readdir(`/proc/${pid}/task`)).length;

/** Reads files to their end in parallel, one `cat` each. */
function readAllAtOnce(paths: string[]): Promise<unknown> {
  return Promise.all(
    paths.map(
      (p) =>
        new Promise<void>((resolve, reject) => {
          const c = spawn("cat", [p], { stdio: ["ignore", "ignore", "inherit"] });
          c.once("error", reject);
          c.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`cat ${p}: exit ${code}`))));
        }),
    ),
  );
}

describe("the daemon's memory", () => {
  it("stays flat while parallel readers make its worker threads come and go", async () => {
    const dir = await t.dir();
    const source = join(dir, "source.bin");
    const SIDE = 4096;
    const size = SIDE + 2 * MAX_READ;
    await writeFile(source, Buffer.alloc(size, 7));
    const st = await stat(source, { bigint: true });
    const mount = await t.mount(dir, { threads: THREADS });
    // A round: THREADS files, each a small sidecar then a range of the source, read at once. A
    // read blocks on its sidecar until the controller writes it, and the first fill of the round
    // waits (a bounded while) until libfuse has started every worker it may: each reader then
    // holds a worker, whose first read fills its 1 MiB buffer. Once the round is over, libfuse
    // retires the workers beyond its idle count; the next round starts new ones.
    let round = 0;
    let peak = 0;
    const rounds = async (n: number) => {
      for (let r = 0; r < n; r++, round++) {
        const sidecarDir = join(dir, "sidecars", `r${round}`);
        let waited = false;
        const files = Array.from({ length: THREADS }, (_, i) => `r${round}/f${i}.bin`);
        for (const [i, f] of files.entries()) {
          const part: ComputedPart = {
            path: join(sidecarDir, `${i}.bin`),
            length: SIDE,
            tensor: { index: 0, name: "side" },
            label: "side",
            async produce() {
              for (let k = 0; !waited && k < 500 && (await threadsOf(mount.pid)) < OTHER_THREADS + THREADS; k++) await new Promise((w) => setTimeout(w, 10));
              waited = true;
              peak = Math.max(peak, await threadsOf(mount.pid));
              return new Uint8Array(SIDE);
            },
          };
          const plan: FilePlan = {
            size,
            mtimeNs: st.mtimeNs,
            memory: new Uint8Array(0),
            sources: [{ path: source, dev: st.dev, ino: st.ino, size, mtimeNs: st.mtimeNs }],
            sidecars: [{ path: part.path, length: SIDE }],
            extents: [
              { kind: "sidecar", at: 0, sidecar: 0, offset: 0, length: SIDE },
              { kind: "source", at: SIDE, source: 0, offset: SIDE, length: size - SIDE },
            ],
          };
          await mount.addFile(f, plan, [part]);
        }
        await readAllAtOnce(files.map((f) => join(mount.dir, f)));
        await mount.remove(`r${round}`);
        await mount.sidecars.settled(); // their fsyncs and `.hashed` files, written after the reads
        await rm(sidecarDir, { recursive: true, force: true });
      }
    };
    await rounds(3); // warm-up: the allocator's arenas, the tree, a full set of workers
    const before = await rss(mount.pid);
    await rounds(30);
    const after = await rss(mount.pid);
    // At most every worker's buffer alive at once, and as much again for the allocator's slack:
    // bounded by the buffer size, not by how many workers came and went (up to THREADS a round).
    expect(after - before).toBeLessThanOrEqual(2 * THREADS * MAX_READ);
  }, 300_000);

  it("keeps its workers and its memory over many cold reads of the mounted files", async () => {
    const dir = await t.dir();
    const source = join(dir, "source.bin");
    const HEAD = 4096;
    const PART = 8 * MAX_READ; // read ahead by the kernel: several requests in flight at once
    const FILES = 4;
    const bytes = randomBytes(FILES * PART);
    await writeFile(source, bytes);
    const st = await stat(source, { bigint: true });
    const mount = await t.mount(dir, { threads: THREADS });
    const files: string[] = [];
    for (let i = 0; i < FILES; i++) {
      const plan: FilePlan = {
        size: HEAD + PART,
        mtimeNs: st.mtimeNs,
        memory: new Uint8Array(HEAD).fill(i),
        sources: [{ path: source, dev: st.dev, ino: st.ino, size: bytes.length, mtimeNs: st.mtimeNs }],
        sidecars: [],
        extents: [
          { kind: "memory", at: 0, offset: 0, length: HEAD },
          { kind: "source", at: HEAD, source: 0, offset: i * PART, length: PART },
        ],
      };
      await mount.addFile(`f${i}.bin`, plan, []);
      files.push(join(mount.dir, `f${i}.bin`));
    }
    // Cold: the page cache of the mounted files and of the source dropped before every round
    // (dd's nocache is fadvise DONTNEED on the file: no root needed).
    const uncache = (p: string) => execFileSync("dd", [`if=${p}`, "iflag=nocache", "count=0", "status=none"]);
    const round = async () => {
      for (const p of [...files, source]) uncache(p);
      await readAllAtOnce(files);
    };
    await round();
    await round();
    const want = (i: number) => sha256Of(Buffer.concat([Buffer.alloc(HEAD, i), bytes.subarray(i * PART, (i + 1) * PART)]));
    expect(await fileDigest(files[1]!)).toBe(want(1));
    const threadsBefore = await threadsOf(mount.pid);
    const before = await rss(mount.pid);
    // the most threads seen while reading (sampled: the peak may fall between samples)
    let peak = threadsBefore;
    let reading = true;
    const sampler = (async () => {
      while (reading) {
        peak = Math.max(peak, await threadsOf(mount.pid));
        await new Promise((w) => setTimeout(w, 10));
      }
    })();
    for (let r = 0; r < 20; r++) await round();
    reading = false;
    await sampler;
    const threadsAfter = await threadsOf(mount.pid);
    const after = await rss(mount.pid);
    expect(await fileDigest(files[3]!)).toBe(want(3));
    // Idle workers are kept (up to THREADS): none retired, so no thread (with its stack and
    // buffers) is started again for the next read.
    expect(threadsAfter).toBeGreaterThanOrEqual(peak);
    expect(threadsAfter).toBeLessThanOrEqual(OTHER_THREADS + THREADS);
    // What may grow: the workers started meanwhile (if any), each with its read buffer and
    // libfuse's request buffer, and 1 MiB of slack for the allocator. Not a MiB per read.
    expect(after - before).toBeLessThanOrEqual((threadsAfter - threadsBefore) * 2.5 * MAX_READ + MAX_READ);
  }, 300_000);

  it("holds after the first read what it holds after any number: its read buffers are made once", async () => {
    const dir = await t.dir();
    const source = join(dir, "source.bin");
    const PART = 8 * MAX_READ; // read ahead by the kernel: several requests in flight at once
    const bytes = randomBytes(PART);
    await writeFile(source, bytes);
    const st = await stat(source, { bigint: true });
    const mount = await t.mount(dir, { threads: THREADS });
    const plan: FilePlan = {
      size: PART,
      mtimeNs: st.mtimeNs,
      memory: new Uint8Array(0),
      sources: [{ path: source, dev: st.dev, ino: st.ino, size: bytes.length, mtimeNs: st.mtimeNs }],
      sidecars: [],
      extents: [{ kind: "source", at: 0, source: 0, offset: 0, length: PART }],
    };
    await mount.addFile("f.bin", plan, []);
    const file = join(mount.dir, "f.bin");
    // One cold read of the whole file by a fresh process, as a model load does: its page cache
    // and the source's dropped first, so every byte is the daemon's to serve.
    const uncache = (p: string) => execFileSync("dd", [`if=${p}`, "iflag=nocache", "count=0", "status=none"]);
    const coldRead = async () => {
      uncache(file);
      uncache(source);
      await readAllAtOnce([file]);
    };
    await coldRead();
    const threadsBefore = await threadsOf(mount.pid);
    const before = await rss(mount.pid);
    // Spread over time (a pause between reads, not a bound on any), so each may find a
    // different set of workers idle and the requests of one land on workers the last did not use.
    for (let r = 0; r < 20; r++) {
      await coldRead();
      await new Promise((w) => setTimeout(w, 20 * (r % 4)));
    }
    const threadsAfter = await threadsOf(mount.pid);
    const after = await rss(mount.pid);
    expect(await fileDigest(file)).toBe(sha256Of(bytes));
    // What may grow: the pages of a worker started meanwhile (its stack, the first page of
    // libfuse's request buffer), a few each, and a page or two of slack; never its part of a
    // 1 MiB read buffer, which a worker's reads used to fault in as far as they reached.
    const PAGE = 4096;
    expect(after - before).toBeLessThanOrEqual((threadsAfter - threadsBefore) * 8 * PAGE + 2 * PAGE);
  }, 300_000);
});

function sha256Of(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}
