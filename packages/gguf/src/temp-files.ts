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

/** `.NAME.PID.HEX.tmp`, the temp name writeFileAtomic gives the output NAME. */
export function tempFileName(base: string, pid: number, nonce: string): string {
  return `.${base}.${pid}.${nonce}.tmp`;
}

/** The pid in a temp name made by tempFileName for `base`, or undefined if it is not one. */
export function tempFilePid(entry: string, base: string): number | undefined {
  const prefix = `.${base}.`;
  if (!entry.startsWith(prefix) || !entry.endsWith(".tmp")) return undefined;
  const m = /^(\d+)\.[0-9a-f]+$/.exec(entry.slice(prefix.length, -".tmp".length));
  return m ? Number(m[1]) : undefined;
}
