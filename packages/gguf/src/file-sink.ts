// Node-only: atomic file output. Kept apart so browser bundles do not pull in node:fs.
import { randomBytes } from "node:crypto";
import { open, readdir, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { GgufError } from "./errors";
import type { RangeCopier } from "./types";
import { tempFileName, tempFilePid, trackTempFile, untrackTempFile } from "./temp-files";

/** Appends `length` bytes of another open file at the write position with `copier`; false when it declined. */
export type FileCopy = (copier: RangeCopier, srcFd: number, srcOffset: number, length: number) => Promise<boolean>;

/**
 * Write a file atomically: `produce` streams chunks into a temp file in the same directory,
 * which is fsynced and renamed over `path`. On any error the temp file is removed; temp
 * files that dead processes left for the same output (a SIGKILL mid-write) are removed first.
 */
export async function writeFileAtomic(
  path: string,
  produce: (write: (chunk: Uint8Array) => Promise<void>, copy: FileCopy) => Promise<void>,
): Promise<number> {
  const dir = dirname(path);
  const base = basename(path);
  await removeStaleTempFiles(dir, base);
  const tmp = join(dir, tempFileName(base, process.pid, randomBytes(6).toString("hex")));
  let fh;
  try {
    fh = await open(tmp, "wx");
  } catch (cause) {
    throw new GgufError("IO", `cannot create temp file next to it: ${(cause as Error).message}`, { source: path, cause });
  }
  trackTempFile(tmp);
  let pos = 0;
  let done = false;
  try {
    const handle = fh;
    const copy: FileCopy = async (copier, srcFd, srcOffset, length) => {
      let ok: boolean;
      try {
        ok = await copier(srcFd, srcOffset, handle.fd, pos, length);
      } catch (cause) {
        throw writeError(path, pos, cause);
      }
      if (ok) pos += length;
      return ok;
    };
    await produce(async (chunk) => {
      let off = 0;
      while (off < chunk.length) {
        let bytesWritten: number;
        try {
          ({ bytesWritten } = await handle.write(chunk, off, chunk.length - off, pos));
        } catch (cause) {
          throw writeError(path, pos, cause);
        }
        off += bytesWritten;
        pos += bytesWritten;
      }
    }, copy);
    try {
      await handle.sync();
      await handle.close();
      fh = undefined;
      await rename(tmp, path);
    } catch (cause) {
      throw writeError(path, pos, cause);
    }
    done = true;
  } finally {
    if (fh !== undefined) await fh.close().catch(() => undefined);
    if (!done) await unlink(tmp).catch(() => undefined);
    untrackTempFile(tmp);
  }
  return pos;
}

function writeError(path: string, offset: number, cause: unknown): GgufError {
  if (cause instanceof GgufError) return cause;
  const code = (cause as NodeJS.ErrnoException).code;
  const what =
    code === "ENOSPC"
      ? "no space left on the device"
      : code === "EDQUOT"
        ? "disk quota exceeded"
        : code === "EFBIG"
          ? "file too large (the file system's or the process's file size limit, ulimit -f)"
          : (cause as Error).message;
  return new GgufError("IO", `cannot write: ${what}`, { source: path, offset, cause });
}

async function removeStaleTempFiles(dir: string, base: string): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch {
    return; // the open below reports a missing or unreadable directory
  }
  for (const entry of entries) {
    const pid = tempFilePid(entry, base);
    if (pid === undefined || pid === process.pid || processAlive(pid)) continue;
    await unlink(join(dir, entry)).catch(() => undefined);
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
