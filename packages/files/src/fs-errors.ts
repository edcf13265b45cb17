import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import { dirname } from "node:path";

/** A failure of a file system call, as Node reports it (`code`, `syscall`, `path`). */
export function isSystemError(e: unknown): e is NodeJS.ErrnoException {
  return e instanceof Error && typeof (e as NodeJS.ErrnoException).code === "string" && typeof (e as NodeJS.ErrnoException).syscall === "string";
}

/**
 * Why a folder cannot be created or written to, in words, from the nearest part of the path
 * that exists. Node's own error can mislead: a recursive mkdir on a read-only mount fails with
 * ENOENT, not EROFS, and ENOTDIR does not say which part is the file.
 */
export async function whyNotWritable(dir: string, e: NodeJS.ErrnoException): Promise<string> {
  let at = dir;
  for (;;) {
    const st = await stat(at).catch(() => undefined);
    if (st) {
      if (!st.isDirectory()) return `${at} is a file, not a folder (ENOTDIR)`;
      break;
    }
    const up = dirname(at);
    if (up === at) return `${describeCode(e)}`;
    at = up;
  }
  try {
    await access(at, constants.W_OK);
  } catch (denied) {
    const code = (denied as NodeJS.ErrnoException).code;
    if (code === "EROFS") return `${at} is on a read-only file system (EROFS)`;
    if (code === "EACCES" || code === "EPERM") return `${at} is not writable by this user (${code})`;
  }
  if (e.code === "ENOSPC") return `no space left on the file system of ${at} (ENOSPC)`;
  if (e.code === "EDQUOT") return `the disk quota on ${at} is used up (EDQUOT)`;
  return describeCode(e);
}

function describeCode(e: NodeJS.ErrnoException): string {
  // Node's message is "CODE: strerror, syscall 'path'": keep the words, name the call
  const words = e.message.replace(/^[A-Z0-9_]+: /, "").replace(/, \w+ '.*'$/, "");
  return `${words} (${e.code}, ${e.syscall}${e.path ? ` ${e.path}` : ""})`;
}
