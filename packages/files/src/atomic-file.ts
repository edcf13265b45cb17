// Node-only: atomic file output, and the sweep of what killed writers left. The browser build
// swaps this module for node-io.browser.ts, so a bundle never pulls in node:fs.
import { constants } from "node:fs";
import { open, readdir, rename, rm, stat, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { FilesError } from "./errors";
import { processAlive, randomHex, tempFileName, tempFileOwner, trackTempFile, untrackTempFile } from "./temp-files";

/**
 * Copies `length` bytes from one open file to another without passing them through
 * JS (copy_file_range, reflink). Resolves true when all bytes were copied, false when
 * it cannot copy this pair of files (then the writer copies through memory instead).
 */
export type RangeCopier = (srcFd: number, srcOffset: number, dstFd: number, dstOffset: number, length: number) => Promise<boolean>;

/** What a writeFileAtomic producer writes through: bytes, or ranges of another open file. */
export interface AtomicFileOutput {
  /** Appends `chunk`; the chunk may be reused once this resolves. */
  write(chunk: Uint8Array): Promise<void>;
  /**
   * Appends `length` bytes of the open file `srcFd` from `srcOffset`, copied in the kernel by
   * `copier` (e.g. kernelRangeCopier(nativeFileCopy()), the kernel call from @compat/tensor-ops). False when the copier declined
   * before the first byte: nothing was appended, write the bytes instead.
   */
  copyRange(copier: RangeCopier, srcFd: number, srcOffset: number, length: number): Promise<boolean>;
}

/** The content of an atomic write: bytes, text (UTF-8), or a producer that streams it. */
export type AtomicFileContent = Uint8Array | string | ((out: AtomicFileOutput) => Promise<void>);

/**
 * Bytes written between two write-behind flushes. While the writer goes on, an fdatasync of
 * what is already written runs on libuv's thread pool, so the device writes overlap the
 * copying and the final fsync only waits for the last stretch (it was ~30% of a large
 * translation when all of it was flushed at the end).
 */
const WRITE_BEHIND = 64 * 1024 * 1024;

/**
 * Writes a file atomically: the content goes into a temp file next to `path`
 * (`.NAME.PID.HEX.tmp`, replaceAtomically), which is fsynced and renamed over `path`, so `path`
 * is either its old self or complete. On any error the temp file is removed; temp files that
 * dead processes left for the same output (a SIGKILL mid-write) are removed first. Returns the
 * bytes written.
 */
export async function writeFileAtomic(path: string, content: AtomicFileContent): Promise<number> {
  const produce = typeof content === "function" ? content : bytesOf(content);
  let pos = 0;
  const fill = async (tmp: string): Promise<void> => {
    let fh: FileHandle | undefined;
    try {
      fh = await open(tmp, "wx");
    } catch (cause) {
      throw new FilesError("IO", `cannot create temp file next to it: ${(cause as Error).message}`, { source: path, cause });
    }
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
      const copyRange: AtomicFileOutput["copyRange"] = async (copier, srcFd, srcOffset, length) => {
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
      const write: AtomicFileOutput["write"] = async (chunk) => {
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
      };
      await produce({ write, copyRange });
      try {
        await flushing;
        if (flushError !== undefined) throw flushError;
        await handle.sync();
        await handle.close();
        fh = undefined;
      } catch (cause) {
        throw writeError(path, pos, cause);
      }
    } finally {
      await flushing; // never close the descriptor under a flush still using it
      if (fh !== undefined) await fh.close().catch(() => undefined);
    }
  };
  try {
    await replaceAtomically(path, fill);
  } catch (cause) {
    // a failure of the file system is a write error; what the producer throws (a translation
    // whose op cannot take its input) is its own typed error and goes on as it is
    throw systemError(cause) ? writeError(path, pos, cause) : cause;
  }
  return pos;
}

/** An error of a system call (ENOSPC, EACCES, ...), as Node reports one. */
function systemError(cause: unknown): boolean {
  return cause instanceof Error && typeof (cause as NodeJS.ErrnoException).syscall === "string";
}

/**
 * Makes `path` atomically with `make(tmp)`, which creates a file, a link or a directory at
 * `tmp`, a fresh temp path beside `path` (tempPathFor); the temp is then renamed over `path`
 * (a link there is replaced, not followed). The temp is removed when `make` or the rename
 * fails, and listed in pendingTempFiles() meanwhile; temps that dead processes left for the
 * same output are removed first. writeFileAtomic is this for a file's bytes.
 */
export async function replaceAtomically(path: string, make: (tmp: string) => Promise<void>): Promise<void> {
  await sweepTempFiles(dirname(path), { name: basename(path) });
  const tmp = tempPathFor(path);
  trackTempFile(tmp);
  let done = false;
  try {
    await make(tmp);
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
    done = true;
  } finally {
    if (!done) await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    untrackTempFile(tmp);
  }
}

function writeError(path: string, offset: number, cause: unknown): FilesError {
  if (cause instanceof FilesError && cause.details.source !== undefined) return cause; // one that names its file already
  const code = (cause as NodeJS.ErrnoException).code;
  const what =
    code === "ENOSPC"
      ? "no space left on the device"
      : code === "EDQUOT"
        ? "disk quota exceeded"
        : code === "EFBIG"
          ? "file too large (the file system's or the process's file size limit, ulimit -f)"
          : (cause as Error).message;
  return new FilesError("IO", `cannot write: ${what}`, { source: path, offset, cause });
}

/**
 * A fresh temp path next to `path` in the one naming (`.NAME.PID.HEX.tmp`), for an output that is
 * not a single file (a directory staged there and renamed over `path` by the caller):
 * sweepTempFiles removes it once this process is gone.
 */
export function tempPathFor(path: string): string {
  return join(dirname(path), tempFileName(basename(path), process.pid, randomHex(6)));
}

function bytesOf(content: Uint8Array | string): (out: AtomicFileOutput) => Promise<void> {
  const bytes = typeof content === "string" ? new TextEncoder().encode(content) : content;
  return (out) => out.write(bytes);
}

/**
 * Removes the temp files (or staged directories) in `dir` named by tempPathFor whose writing
 * process is gone: what a writer killed mid-write leaves. Only those of output `name` when
 * given; with `olderThanMs`, also those last changed longer ago than that whatever their pid
 * says (for writes known to take a moment, where a pid may have been reused). This process's
 * own are never touched. Returns the names removed.
 */
export async function sweepTempFiles(dir: string, opts: { name?: string; olderThanMs?: number } = {}): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch {
    return []; // a missing or unreadable directory: the write itself reports it
  }
  const removed: string[] = [];
  for (const entry of entries) {
    const owner = tempFileOwner(entry);
    if (owner === undefined || (opts.name !== undefined && owner.base !== opts.name) || owner.pid === process.pid) continue;
    if (processAlive(owner.pid)) {
      if (opts.olderThanMs === undefined) continue;
      const changed = await stat(join(dir, entry)).then((st) => st.mtimeMs, () => Date.now());
      if (Date.now() - changed <= opts.olderThanMs) continue;
    }
    await rm(join(dir, entry), { recursive: true, force: true }).catch(() => undefined);
    removed.push(entry);
  }
  return removed;
}
