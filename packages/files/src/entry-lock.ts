import { readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { FilesError } from "./errors";
import { processState, thisProcess, type ProcessIdentity } from "./owner";
import { randomHex } from "./temp-files";

/**
 * A lock file per guarded output (a cache entry, ...), created exclusively (O_EXCL) and holding its owner's identity
 * (pid, start time, boot, pid namespace) as JSON. Its owner refreshes its mtime while it
 * holds it. A lock is stale when its owner is gone by that identity, or, where this machine
 * cannot tell (another pid namespace, a lock without a start time), when it has not been
 * refreshed for `staleMs`.
 */
export interface LockOptions {
  /** Give up (LOCK_TIMEOUT) after waiting this long for a live owner. */
  timeoutMs: number;
  /** An owner whose liveness cannot be checked counts as gone after this long without a refresh. */
  staleMs: number;
  signal?: AbortSignal;
  /** Told once when the wait starts, then every minute: who holds the lock and until when we wait. */
  onWait?(line: string): void;
  /** What the lock guards, for messages ("cache entry 1a2b…"). */
  what: string;
}

/** How often a held lock is refreshed; far below any sensible `staleMs`. */
const HEARTBEAT_MS = 5_000;
const POLL_MS = 100;
const TELL_EVERY_MS = 60_000;

interface LockFile {
  owner: ProcessIdentity;
  /** The file's text, to remove exactly the lock judged stale. */
  raw: string;
  mtimeMs: number;
}

/** Takes the lock at `path`, waiting for a live owner and taking over from a gone one. Returns its release. */
export async function acquireLock(path: string, opts: LockOptions): Promise<() => Promise<void>> {
  const deadline = Date.now() + opts.timeoutMs;
  const body = JSON.stringify({ ...thisProcess(), token: randomHex(6) });
  const since = Date.now();
  let told = 0;
  for (;;) {
    if (opts.signal?.aborted) throw new FilesError("ABORTED", `the wait for ${opts.what} was stopped`, { source: path });
    try {
      await writeFile(path, body, { flag: "wx" });
      return held(path, body);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    const lock = await readLock(path);
    if (!lock) continue; // released meanwhile
    if (isStale(lock, opts.staleMs)) {
      await removeExactly(path, lock.raw);
      continue;
    }
    if (Date.now() > deadline) {
      throw new FilesError("LOCK_TIMEOUT", `${opts.what} is still locked by ${describeOwner(lock, opts.staleMs)} after ${Math.round(opts.timeoutMs / 1000)} s (${path})`, {
        path,
        owner: lock.owner,
      });
    }
    if (Date.now() - told >= TELL_EVERY_MS) {
      const waited = told === 0 ? "" : ` (waiting ${Math.round((Date.now() - since) / 1000)} s)`;
      opts.onWait?.(`waiting for ${opts.what}: ${describeOwner(lock, opts.staleMs)} is writing it${waited}; lock ${path}`);
      told = Date.now();
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** Whether `path` is a lock a live owner holds; a stale one is removed on the way. */
export async function lockedByLive(path: string, staleMs: number): Promise<boolean> {
  const lock = await readLock(path);
  if (!lock) return false;
  if (!isStale(lock, staleMs)) return true;
  await removeExactly(path, lock.raw);
  return false;
}

/** Refreshed while held; released only if it is still ours. */
function held(path: string, body: string): () => Promise<void> {
  const beat = setInterval(() => {
    const now = new Date();
    void utimes(path, now, now).catch(() => undefined);
  }, HEARTBEAT_MS);
  beat.unref();
  return async () => {
    clearInterval(beat);
    await removeExactly(path, body);
  };
}

async function readLock(path: string): Promise<LockFile | undefined> {
  let raw: string;
  let mtimeMs: number;
  try {
    [raw, mtimeMs] = await Promise.all([readFile(path, "utf8"), stat(path).then((s) => s.mtimeMs)]);
  } catch {
    return undefined;
  }
  return { owner: parseOwner(raw), raw, mtimeMs };
}

/** JSON as acquireLock writes it; also the "<pid> <token>" of earlier versions (a pid alone). */
function parseOwner(raw: string): ProcessIdentity {
  try {
    const j = JSON.parse(raw) as Record<string, unknown>;
    const str = (k: string) => (typeof j[k] === "string" ? { [k]: j[k] as string } : {});
    return { pid: typeof j.pid === "number" ? j.pid : NaN, ...str("start"), ...str("boot"), ...str("pidNs") };
  } catch {
    return { pid: Number(raw.trim().split(/\s+/)[0]) };
  }
}

function isStale(lock: LockFile, staleMs: number): boolean {
  const state = processState(lock.owner);
  if (state !== "unknown") return state === "gone";
  return Date.now() - lock.mtimeMs > staleMs;
}

function describeOwner(lock: LockFile, staleMs: number): string {
  const who = Number.isSafeInteger(lock.owner.pid) ? `pid ${lock.owner.pid}` : "an unnamed process";
  if (processState(lock.owner) === "alive") return `${who} (running)`;
  const left = Math.max(0, Math.round((lock.mtimeMs + staleMs - Date.now()) / 1000));
  return `${who} (not one this machine can check: the lock is taken over if it is not refreshed within ${left} s)`;
}

/**
 * Removes the lock only if it still has the text it was judged by: another waiter may have
 * taken a stale lock over already, and its new lock must stay. (Two waiters reading the
 * same stale lock can still race in the few microseconds between the read and the unlink;
 * the worst outcome is the same entry written twice, and each write is atomic.)
 */
async function removeExactly(path: string, raw: string): Promise<void> {
  const now = await readFile(path, "utf8").catch(() => undefined);
  if (now === raw) await rm(path, { force: true });
}
