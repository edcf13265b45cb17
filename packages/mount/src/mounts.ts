import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { promisify } from "node:util";

/** The file system type of our mounts in /proc/self/mountinfo (the daemon's `subtype`). */
const FS_TYPE = "fuse.ollama-compat";

export interface MountEntry {
  /** The mount point, unescaped. */
  point: string;
  fsType: string;
  /** The mount source: `ollama-compat` for ours. */
  source: string;
}

/** `\040` and friends: how mountinfo writes spaces, tabs, newlines and backslashes. */
function unescape(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** The mounts this process sees (/proc/self/mountinfo), the latest last. */
export function mountTable(): MountEntry[] {
  let text: string;
  try {
    text = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  const out: MountEntry[] = [];
  for (const line of text.split("\n")) {
    // id parent major:minor root point options [optional...] - type source superoptions
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const left = line.slice(0, sep).split(" ");
    const right = line.slice(sep + 3).split(" ");
    if (left.length < 5 || right.length < 2) continue;
    out.push({ point: unescape(left[4]!), fsType: right[0]!, source: unescape(right[1]!) });
  }
  return out;
}

/** The mount whose mount point is `dir` (an absolute, resolved path), the one on top if stacked. */
export function mountAt(dir: string): MountEntry | undefined {
  return mountTable()
    .filter((m) => m.point === dir)
    .pop();
}

/** What is at a mount point: nothing of ours, a live mount, or one whose daemon is gone. */
export async function mountState(dir: string): Promise<"none" | "live" | "stale" | "other"> {
  const m = mountAt(dir);
  if (m === undefined) return "none";
  if (m.fsType !== FS_TYPE) return "other";
  try {
    // a listing always asks the daemon (a stat may be answered from the kernel's attribute cache)
    await readdir(dir);
    return "live";
  } catch (e) {
    // a FUSE mount whose daemon died answers every request with ENOTCONN
    // (ECONNABORTED: its connection was just aborted, the entry is on its way out)
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOTCONN" || code === "ECONNABORTED") return "stale";
    throw e;
  }
}

const run = promisify(execFile);

/**
 * Detaches the FUSE mount at `dir` (lazily: whatever still has a file of it open gets errors
 * from it, nothing else waits). fusermount3 works for the user who mounted it and for root;
 * root without fusermount3 uses umount.
 */
export async function detachMount(dir: string): Promise<void> {
  try {
    await run("fusermount3", ["-u", "-z", "--", dir]);
    return;
  } catch (e) {
    if (process.getuid?.() !== 0) throw new Error(`fusermount3 -u -z ${dir}: ${((e as { stderr?: string }).stderr ?? (e as Error).message).trim()}`);
  }
  await run("umount", ["-l", dir]);
}
