/**
 * Temp files this process is writing right now (absolute or as given). Kept free of
 * Node imports so the browser build can carry it; a CLI's signal handler removes them
 * (see pendingTempFiles), since a library should not install signal handlers itself.
 */
const live = new Set<string>();

export function trackTempFile(path: string): void {
  live.add(path);
}

export function untrackTempFile(path: string): void {
  live.delete(path);
}

/** Temp files of atomic writes still in progress in this process (to remove on SIGINT/SIGTERM). */
export function pendingTempFiles(): readonly string[] {
  return [...live];
}

/**
 * `bytes` random bytes in hex, for names and tokens that must differ from other writers' (temp
 * files, lock tokens), not stay secret: Math.random, so that loading this package does not load
 * node:crypto (a few ms of every command's start; the temp file is created exclusively anyway).
 */
export function randomHex(bytes: number): string {
  let out = "";
  for (let i = 0; i < bytes; i++) out += Math.floor(Math.random() * 256).toString(16).padStart(2, "0");
  return out;
}

/** `.NAME.PID.HEX.tmp`: the one temp name of an output NAME written by process PID. */
export function tempFileName(base: string, pid: number, nonce: string): string {
  return `.${base}.${pid}.${nonce}.tmp`;
}

/** The output name and writer pid of a temp name made by tempFileName, or undefined if it is not one. */
export function tempFileOwner(entry: string): { base: string; pid: number } | undefined {
  const m = /^\.(.+)\.(\d+)\.[0-9a-f]+\.tmp$/.exec(entry);
  return m ? { base: m[1] as string, pid: Number(m[2]) } : undefined;
}

/**
 * Whether `pid` names a running process (one of another user counts: EPERM). What every sweep of
 * leftovers asks of a temp file's or a lock's owner before removing it.
 */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === "EPERM";
  }
}
