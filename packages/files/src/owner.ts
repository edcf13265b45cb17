import { readFileSync, readlinkSync } from "node:fs";
import { lstat, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { processAlive } from "./temp-files";

/**
 * Who owns a lock or a temporary folder: a pid alone is not enough. A pid is reused once its
 * process is gone (a lock naming PID 1 is always "alive"), and a pid means nothing in another
 * pid namespace (containers sharing a cache volume). On Linux the process's start time (from
 * /proc/<pid>/stat), the boot it ran in and its pid namespace pin it down.
 */
export interface ProcessIdentity {
  pid: number;
  /** Start time in clock ticks since boot (/proc/<pid>/stat, field 22). */
  start?: string;
  /** /proc/sys/kernel/random/boot_id. */
  boot?: string;
  /** The pid namespace, as /proc/self/ns/pid names it (`pid:[4026531836]`). */
  pidNs?: string;
}

/** alive: that very process runs; gone: it does not; unknown: this machine cannot tell (another namespace, no start time). */
export type ProcessState = "alive" | "gone" | "unknown";

let self: ProcessIdentity | undefined;

/** This process's identity (read once). */
export function thisProcess(): ProcessIdentity {
  if (self) return self;
  const start = startTime(process.pid);
  const boot = readText("/proc/sys/kernel/random/boot_id");
  let pidNs: string | undefined;
  try {
    pidNs = readlinkSync("/proc/self/ns/pid");
  } catch {
    pidNs = undefined;
  }
  self = { pid: process.pid, ...(start !== undefined ? { start } : {}), ...(boot !== undefined ? { boot } : {}), ...(pidNs !== undefined ? { pidNs } : {}) };
  return self;
}

/** Whether the process `id` names still runs, judged by as much of its identity as was recorded. */
export function processState(id: ProcessIdentity): ProcessState {
  if (!Number.isSafeInteger(id.pid) || id.pid <= 0) return "unknown";
  const me = thisProcess();
  if (id.boot !== undefined && me.boot !== undefined && id.boot !== me.boot) return "gone"; // it ran before this boot
  if (id.pidNs !== undefined && me.pidNs !== undefined && id.pidNs !== me.pidNs) return "unknown"; // its pids are not ours
  if (id.start !== undefined && me.start !== undefined) {
    const now = startTime(id.pid);
    if (now !== undefined) return now === id.start ? "alive" : "gone";
  }
  // the pid is all there is (an identity written without /proc, or /proc hides it): any process may have it now
  return processAlive(id.pid) ? "unknown" : "gone";
}

function startTime(pid: number): string | undefined {
  const stat = readText(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so count from the last ')'
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return fields[19]; // field 22 of the whole line
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}

/**
 * A new folder under the system temp dir, `<prefix><pid>-<start>-XXXXXX`, for a process that
 * removes it when done. A process killed with SIGKILL cannot, so first the folders of the same
 * prefix whose owner is gone are removed (only this user's own folders, never through a link).
 */
export async function ownedTempDir(prefix: string): Promise<string> {
  const base = tmpdir();
  const me = thisProcess();
  const uid = process.getuid?.();
  for (const name of await readdir(base).catch(() => [] as string[])) {
    if (!name.startsWith(prefix)) continue;
    const m = /^(\d+)-(\d+|x)-/.exec(name.slice(prefix.length));
    if (!m) continue;
    const owner: ProcessIdentity = { pid: Number(m[1]), ...(m[2] !== "x" ? { start: m[2]! } : {}) };
    if (processState(owner) !== "gone") continue;
    const st = await lstat(join(base, name)).catch(() => undefined);
    if (!st?.isDirectory() || (uid !== undefined && st.uid !== uid)) continue;
    await rm(join(base, name), { recursive: true, force: true }).catch(() => undefined);
  }
  return mkdtemp(join(base, `${prefix}${me.pid}-${me.start ?? "x"}-`));
}
