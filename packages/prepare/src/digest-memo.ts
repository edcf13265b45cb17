import { fstat, statSync, type BigIntStats } from "node:fs";
import { mkdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { Worker } from "node:worker_threads";
import { sweepTempFiles, writeFileAtomic } from "@compat/files";
import { canonicalDigest } from "@compat/store";
import { PrepareError } from "./errors";

const fstatBig = promisify((fd: number, cb: (e: NodeJS.ErrnoException | null, st: BigIntStats) => void) => fstat(fd, { bigint: true }, cb));

/** A file to digest: its path (for messages) and, when it is open already, the descriptor a reader uses. */
export interface SourceFile {
  path: string;
  fd?: number;
}

/**
 * One version of a file's bytes. Any write moves the change time (ctime), which no system
 * call can set back (touch -r restores the mtime only), so equal versions mean equal bytes
 * short of tampering with the clock or the disk underneath.
 */
export interface FileVersion {
  dev: string;
  ino: string;
  size: string;
  mtimeNs: string;
  ctimeNs: string;
}

export async function versionOf(file: SourceFile): Promise<FileVersion> {
  return versionFrom(file.fd !== undefined ? await fstatBig(file.fd) : await stat(file.path, { bigint: true }));
}

/**
 * The version of the file at `path` now, or undefined when it cannot be looked at: a stat of
 * the file's metadata, done synchronously (microseconds, where a trip through libuv's threads
 * costs a start that checks a record for every model of the store about a millisecond each).
 */
export function versionNow(path: string): FileVersion | undefined {
  try {
    return versionFrom(statSync(path, { bigint: true }));
  } catch {
    return undefined;
  }
}

function versionFrom(st: BigIntStats): FileVersion {
  return { dev: String(st.dev), ino: String(st.ino), size: String(st.size), mtimeNs: String(st.mtimeNs), ctimeNs: String(st.ctimeNs) };
}

export function sameVersion(a: FileVersion, b: FileVersion): boolean {
  return a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs;
}

/** A memo temp file lives for the moment of one write; one older than this was left by a killed process (whatever its pid says). */
const STALE_TEMP_MS = 10 * 60_000;

/**
 * The hash runs on a thread of its own: it reads the whole file, and meanwhile the main thread
 * goes on (a translation's in-kernel copies, signals). It opens the file itself, without
 * blocking (a FIFO put in its place must not hang the thread), and hashes it only if it is
 * still the version asked for; it checks the version again at the end.
 */
const HASH_THREAD = `
const { parentPort, workerData } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const fs = require("node:fs");
const { path, version } = workerData;
const same = (st) => String(st.dev) === version.dev && String(st.ino) === version.ino && String(st.size) === version.size &&
  String(st.mtimeNs) === version.mtimeNs && String(st.ctimeNs) === version.ctimeNs;
let fd;
parentPort.postMessage((() => {
try {
  fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  if (!same(fs.fstatSync(fd, { bigint: true }))) return { changed: true };
  const hash = createHash("sha256");
  const buf = Buffer.allocUnsafe(4 << 20);
  for (let at = 0; ; ) {
    const n = fs.readSync(fd, buf, 0, buf.length, at);
    if (n === 0) break;
    hash.update(buf.subarray(0, n));
    at += n;
  }
  if (!same(fs.fstatSync(fd, { bigint: true }))) return { changed: true };
  return { digest: "sha256:" + hash.digest("hex") };
} catch (e) {
  return { error: String((e && e.message) || e) };
} finally {
  if (fd !== undefined) fs.closeSync(fd);
}
})());
`;

/** A hash under way: its result, and a way to stop it when it is no longer wanted. */
export interface Hashing {
  digest: Promise<string>;
  cancel(): void;
}

/**
 * The sha256 of files' bytes, read in full once per version of each file and remembered in
 * `dir` (one small file per inode), so a 40 GB blob is hashed at its first launch and found
 * again with one fstat at every later one.
 */
export class DigestMemo {
  constructor(readonly dir: string) {}

  /** The digest of the bytes `file` holds now, and the version it was taken of. */
  async digest(file: SourceFile, signal?: AbortSignal): Promise<{ digest: string; version: FileVersion }> {
    const version = await versionOf(file);
    return { digest: (await this.recall(version)) ?? (await this.hash(file.path, version, signal).digest), version };
  }

  /** What is remembered for this version, if anything; never reads the file. */
  async recall(version: FileVersion): Promise<string | undefined> {
    try {
      const m = JSON.parse(await readFile(this.memoPath(version), "utf8")) as FileVersion & { digest?: unknown };
      if (sameVersion(m, version) && typeof m.digest === "string" && canonicalDigest(m.digest) === m.digest) return m.digest;
    } catch {
      // none, or unreadable: hash again
    }
    return undefined;
  }

  /**
   * Hashes the file at `path`, which must still be `version` (else SOURCE_CHANGED), on a
   * thread of its own, and remembers the result. Stopped by `signal` or cancel().
   */
  hash(path: string, version: FileVersion, signal?: AbortSignal): Hashing {
    const startedNs = BigInt(Date.now()) * 1_000_000n;
    const thread = new Worker(HASH_THREAD, { eval: true, workerData: { path, version } });
    let settled = false;
    const digest = new Promise<string>((resolve, reject) => {
      const stop = () => {
        void thread.terminate();
        reject(new PrepareError("TRANSLATION_ABORTED", `hashing ${path} was stopped`, { source: path }));
      };
      if (signal?.aborted) stop();
      signal?.addEventListener("abort", stop, { once: true });
      const done = () => {
        settled = true;
        signal?.removeEventListener("abort", stop);
      };
      thread.once("message", (m: { digest?: string; changed?: true; error?: string }) => {
        done();
        if (m.digest) resolve(m.digest);
        else if (m.changed) reject(new PrepareError("SOURCE_CHANGED", `${path} changed while it was hashed; nothing was translated (run again once it is complete)`, { source: path }));
        else reject(new PrepareError("UNSAFE_BLOB", `${path} cannot be hashed: ${m.error}`, { source: path }));
      });
      thread.once("error", (e) => {
        done();
        reject(e);
      });
      thread.once("exit", () => {
        if (settled) return;
        done();
        reject(new PrepareError("TRANSLATION_ABORTED", `hashing ${path} was stopped`, { source: path }));
      });
    }).then(async (d) => {
      // A change within the file system's timestamp granularity of the last one would leave the
      // version as it is: remember only versions older than that (as git does for its index).
      if (startedNs - BigInt(latest(version)) > granularityNs(version)) await this.remember(version, d);
      return d;
    });
    void digest.catch(() => undefined); // whoever awaits it sees the error; no one awaiting is no crash
    return {
      digest,
      cancel: () => {
        if (!settled) void thread.terminate();
      },
    };
  }

  /** Removes memo temp files that killed writers left (gguf's sweep; a memo write lasts a moment, so an old one goes too). */
  async sweep(): Promise<void> {
    await sweepTempFiles(this.dir, { olderThanMs: STALE_TEMP_MS });
  }

  private memoPath(v: FileVersion): string {
    return join(this.dir, `${v.dev}-${v.ino}.json`);
  }

  /** Written atomically (readers see the old memo or the new one). A memo that cannot be written only costs a hash. */
  private async remember(version: FileVersion, digest: string): Promise<void> {
    try {
      await mkdir(this.dir, { recursive: true });
      await writeFileAtomic(this.memoPath(version), JSON.stringify({ ...version, digest }) + "\n");
    } catch {
      // no memo: the next launch hashes the file again
    }
  }
}

function latest(v: FileVersion): string {
  return BigInt(v.mtimeNs) > BigInt(v.ctimeNs) ? v.mtimeNs : v.ctimeNs;
}

/**
 * Linux stamps files from a clock that ticks every 1-10 ms; file systems that keep whole
 * seconds (FAT, some network mounts) show as times with no fraction at all.
 */
function granularityNs(v: FileVersion): bigint {
  const wholeSeconds = BigInt(v.mtimeNs) % 1_000_000_000n === 0n && BigInt(v.ctimeNs) % 1_000_000_000n === 0n;
  return wholeSeconds ? 2_000_000_000n : 100_000_000n;
}
