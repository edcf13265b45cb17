// Node-only: atomic file output. Kept apart so browser bundles do not pull in node:fs.
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { open, readdir, rename, unlink, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { GgufError } from "./errors";
import type { RangeCopier } from "./types";
import { tempFileName, tempFilePid, trackTempFile, untrackTempFile } from "./temp-files";

/** Appends `length` bytes of another open file at the write position with `copier`; false when it declined. */
export type FileCopy = (copier: RangeCopier, srcFd: number, srcOffset: number, length: number) => Promise<boolean>;

/**
 * Bytes written between two write-behind flushes. While the writer goes on, an fdatasync of
 * what is already written runs on libuv's thread pool, so the device writes overlap the
 * copying and the final fsync only waits for the last stretch (it was ~30% of a large
 * translation when all of it was flushed at the end).
 */
const WRITE_BEHIND = 64 * 1024 * 1024;

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
  // Write-behind: at most one flush in flight; its failure is reported by the final sync at the latest.
  let flushedAt = 0;
  let flushing: Promise<void> | undefined;
  let flushError: unknown;
  let turnedAt = 0;
  const writeBehind = (handle: FileHandle): void => {
    if (flushing !== undefined || pos - flushedAt < WRITE_BEHIND) return;
    flushedAt = pos;
    flushing = handle.datasync().then(
      () => void (flushing = undefined),
      (cause: unknown) => void ((flushError ??= cause), (flushing = undefined)),
    );
  };
  try {
    const handle = fh;
    // In write-behind-sized pieces, so a long range does not leave all of its flushing to the end.
    const copy: FileCopy = async (copier, srcFd, srcOffset, length) => {
      for (let done = 0; done < length; ) {
        // pieces end on the source's multiples of WRITE_BEHIND: block boundaries, where extents can be shared
        const n = Math.min(WRITE_BEHIND - ((srcOffset + done) % WRITE_BEHIND), length - done);
        let ok: boolean;
        try {
          ok = await copier(srcFd, srcOffset + done, handle.fd, pos, n);
        } catch (cause) {
          throw writeError(path, pos, cause);
        }
        if (!ok) {
          if (done === 0) return false;
          throw writeError(path, pos, new Error("the in-kernel copy stopped midway"));
        }
        pos += n;
        done += n;
        writeBehind(handle);
        // An in-kernel copier may run on this thread and finish before returning: without a
        // turn of the event loop the write-behind flush's completion is never seen, no further
        // flush starts, and the final fsync waits for nearly all of the data (0.3 s per GiB).
        if (pos - turnedAt >= WRITE_BEHIND) {
          turnedAt = pos;
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      }
      return true;
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
      writeBehind(handle);
    }, copy);
    try {
      await flushing;
      if (flushError !== undefined) throw flushError;
      await handle.sync();
      await handle.close();
      fh = undefined;
      // A file being replaced is freed (its cached pages dropped, its blocks released) when its
      // last reference goes: by holding one across the rename and letting it go on the thread
      // pool, that work (~0.2 s per GiB) overlaps whatever the caller does next.
      // (non-blocking and not through a symlink: a FIFO or a link there is not waited on or followed)
      const replaced = await open(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW).catch(() => undefined);
      try {
        await rename(tmp, path);
      } finally {
        void replaced?.close().catch(() => undefined);
      }
    } catch (cause) {
      throw writeError(path, pos, cause);
    }
    done = true;
  } finally {
    await flushing; // never close the descriptor under a flush still using it
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
