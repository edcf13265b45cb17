// Node-only: atomic file output, and the sweep of what killed writers left. The browser build
// swaps this module for node-io.browser.ts, so a bundle never pulls in node:fs.
import { constants, read as readCb } from "node:fs";
import { open, readdir, rename, rm, stat, statfs, type FileHandle } from "node:fs/promises";
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

export interface AtomicFileOptions {
  /**
   * Memory for direct writes: `length` zero-filled bytes starting on a 4096-byte boundary (e.g.
   * @compat/tensor-ops' alignedBytes), or undefined when there is none. Given, with `size` from
   * DIRECT_MIN on, an output on a file system that copies ranges instead of sharing their extents
   * (ext4) is written with O_DIRECT: see writeFileAtomic.
   */
  alignedBytes?(length: number): Uint8Array | undefined;
  /** The bytes the producer will write (a hint: it decides whether direct writes are worth it). */
  size?: number;
  /**
   * Sees every byte of the output that passes through memory on its way to the file, in output
   * order, before it is written; a returned promise is awaited (a hasher's backlog). A range that
   * a copier copies in the kernel does not pass here; with direct writes no copier is asked and
   * every byte does. The chunk may be reused once this returns (or its promise resolves).
   */
  tee?(chunk: Uint8Array): unknown;
  /** Checked before each direct write (a copied range can be most of the file). */
  signal?: AbortSignal;
}

/**
 * Bytes written between two write-behind flushes. While the writer goes on, an fdatasync of
 * what is already written runs on libuv's thread pool, so the device writes overlap the
 * copying and the final fsync only waits for the last stretch (it was ~30% of a large
 * translation when all of it was flushed at the end).
 */
const WRITE_BEHIND = 64 * 1024 * 1024;

/**
 * Bytes per direct write, and blocks per output: one fills while the others' writes are in
 * flight. On the bench machine (ext4 on a virtio disk shared with other guests, `translate` of
 * a 1 GiB blob from the page cache, alternated runs at load 6-8, medians): two blocks of 16 MiB
 * 0.82 and 0.97 s, four of 8 MiB 0.58 and 0.61 s, eight of 4 MiB 0.63 s, against 1.03 s for
 * copy_file_range and its write-behind flushes. More writes in flight keep the device busy when
 * it is shared.
 */
const DIRECT_BLOCK = 8 * 1024 * 1024;
const DIRECT_BLOCKS = 4;

/** Outputs smaller than this go through the page cache: their blocks' memory would cost more than direct writes save. */
export const DIRECT_MIN = 16 * 1024 * 1024;

/** Direct writes start at and span multiples of this (the logical block size of any disk). */
const DIRECT_ALIGN = 4096;

/** ext2/3/4's statfs type: copy_file_range copies the bytes there (no shared extents). */
const EXT4_MAGIC = 0xef53;

/**
 * Per allocator, blocks of finished outputs kept for the next output (a migration writes several,
 * some at once): fresh memory costs a page fault per page on first touch. Let go of a second
 * after the last output ended, so a long-lived process (a server that translated once) does
 * not hold them.
 */
const spareBlocks = new WeakMap<NonNullable<AtomicFileOptions["alignedBytes"]>, { blocks: Uint8Array[]; timer?: NodeJS.Timeout }>();
const KEEP_SPARE_MS = 1000;
const KEEP_BLOCKS = 2 * DIRECT_BLOCKS;

/**
 * Writes a file atomically: the content goes into a temp file next to `path`
 * (`.NAME.PID.HEX.tmp`, replaceAtomically), which is fsynced and renamed over `path`, so `path`
 * is either its old self or complete. On any error the temp file is removed; temp files that
 * dead processes left for the same output (a SIGKILL mid-write) are removed first. Returns the
 * bytes written.
 *
 * The bytes go through the page cache (ranges copied in the kernel by their copier, which
 * shares extents where the file system can: XFS, Btrfs), except on ext4 when `opts` gives
 * aligned memory and a `size` of at least DIRECT_MIN: there a kernel copy is a copy through the
 * page cache and its writeback, and the output is instead assembled in 8 MiB blocks (bytes
 * copied in, ranges read into them) written with O_DIRECT, one block filling while up to three
 * are written (on the bench machine a GiB took 30-40% less time and a third of the kernel CPU). The last
 * block is written padded to 4096 bytes and the file then cut to its size. A direct write the
 * file system refuses (EINVAL) goes through the page cache instead, and so does everything after
 * it. OLLAMA_COMPAT_DIRECT_WRITES=0 turns direct writes off.
 */
export async function writeFileAtomic(path: string, content: AtomicFileContent, opts: AtomicFileOptions = {}): Promise<number> {
  const produce = typeof content === "function" ? content : bytesOf(content);
  let pos = 0;
  const fill = async (tmp: string): Promise<void> => {
    let fh: FileHandle | undefined;
    try {
      fh = await open(tmp, "wx");
    } catch (cause) {
      throw new FilesError("IO", `cannot create temp file next to it: ${(cause as Error).message}`, { source: path, cause });
    }
    const handle = fh;
    let output: OutputPath | undefined;
    try {
      output = (await directOutput(path, tmp, handle, opts, (n) => (pos += n))) ?? pageCacheOutput(path, handle, opts, () => pos, (n) => (pos += n));
      await produce(output);
      try {
        await output.finish();
        await handle.sync();
        await output.close();
        await handle.close();
        fh = undefined;
      } catch (cause) {
        throw writeError(path, pos, cause);
      }
    } finally {
      await output?.close(); // never close the descriptor under a write or flush still using it
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

/** One way of putting the producer's bytes into the temp file. */
interface OutputPath extends AtomicFileOutput {
  /** Everything appended is written (not yet fsynced); called once, after the producer. */
  finish(): Promise<void>;
  /** Waits for what is in flight and lets go of what it holds (idempotent; never throws). */
  close(): Promise<void>;
}

/** Through the page cache: write() for bytes, the copier for ranges, an fdatasync behind every WRITE_BEHIND bytes. */
function pageCacheOutput(path: string, handle: FileHandle, opts: AtomicFileOptions, at: () => number, advance: (n: number) => void): OutputPath {
  // Write-behind: at most one flush in flight; its failure is reported by the final sync at the latest.
  let flushedAt = 0;
  let flushing: Promise<void> | undefined;
  let flushError: unknown;
  let turnedAt = 0;
  const writeBehind = (): void => {
    if (flushing !== undefined || at() - flushedAt < WRITE_BEHIND) return;
    flushedAt = at();
    flushing = handle.datasync().then(
      () => void (flushing = undefined),
      (cause: unknown) => void ((flushError ??= cause), (flushing = undefined)),
    );
  };
  // In write-behind-sized pieces, so a long range does not leave all of its flushing to the end.
  const copyRange: AtomicFileOutput["copyRange"] = async (copier, srcFd, srcOffset, length) => {
    for (let done = 0; done < length; ) {
      // pieces end on the source's multiples of WRITE_BEHIND: block boundaries, where extents can be shared
      const n = Math.min(WRITE_BEHIND - ((srcOffset + done) % WRITE_BEHIND), length - done);
      let ok: boolean;
      try {
        ok = await copier(srcFd, srcOffset + done, handle.fd, at(), n);
      } catch (cause) {
        throw writeError(path, at(), cause);
      }
      if (!ok) {
        if (done === 0) return false;
        throw writeError(path, at(), new Error("the in-kernel copy stopped midway"));
      }
      advance(n);
      done += n;
      writeBehind();
      // An in-kernel copier may run on this thread and finish before returning: without a
      // turn of the event loop the write-behind flush's completion is never seen, no further
      // flush starts, and the final fsync waits for nearly all of the data (0.3 s per GiB).
      if (at() - turnedAt >= WRITE_BEHIND) {
        turnedAt = at();
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    return true;
  };
  const write: AtomicFileOutput["write"] = async (chunk) => {
    if (opts.tee !== undefined) await opts.tee(chunk);
    let off = 0;
    while (off < chunk.length) {
      let bytesWritten: number;
      try {
        ({ bytesWritten } = await handle.write(chunk, off, chunk.length - off, at()));
      } catch (cause) {
        throw writeError(path, at(), cause);
      }
      off += bytesWritten;
      advance(bytesWritten);
    }
    writeBehind();
  };
  return {
    write,
    copyRange,
    finish: async () => {
      await flushing;
      if (flushError !== undefined) throw flushError;
    },
    close: async () => void (await flushing),
  };
}

/**
 * Through O_DIRECT, in aligned blocks (see writeFileAtomic), or undefined when this output is
 * not one for it: direct writes turned off, no aligned memory, small, a file system that shares
 * extents or is not ext4, or an O_DIRECT open refused.
 */
async function directOutput(path: string, tmp: string, handle: FileHandle, opts: AtomicFileOptions, advance: (n: number) => void): Promise<OutputPath | undefined> {
  if (opts.alignedBytes === undefined || (opts.size ?? 0) < DIRECT_MIN || process.env.OLLAMA_COMPAT_DIRECT_WRITES === "0") return undefined;
  if ((await statfs(dirname(path)).catch(() => undefined))?.type !== EXT4_MAGIC) return undefined;
  const alloc = opts.alignedBytes;
  const spare = spareBlocks.get(alloc)?.blocks ?? [];
  const blocks: Uint8Array[] = [];
  for (let i = 0; i < DIRECT_BLOCKS; i++) {
    const b = spare.pop() ?? alloc(DIRECT_BLOCK);
    if (b === undefined || b.length < DIRECT_BLOCK) {
      spare.push(...blocks);
      return undefined;
    }
    blocks.push(b);
  }
  let dio: FileHandle;
  try {
    dio = await open(tmp, constants.O_WRONLY | constants.O_DIRECT);
  } catch {
    spare.push(...blocks);
    return undefined;
  }
  let cur = 0; // the block being filled
  let used = 0; // its bytes
  let blockAt = 0; // where in the file it goes
  let pos = 0; // bytes appended
  const writing: Array<Promise<void> | undefined> = blocks.map(() => undefined);
  let failure: unknown;
  let declined = false; // a direct write was refused: the rest through the page cache
  let closed = false;

  // Writes block[0, length) at `at`: directly (padded to DIRECT_ALIGN), else through the page cache.
  const put = async (block: Uint8Array, at: number, length: number): Promise<void> => {
    const padded = Math.ceil(length / DIRECT_ALIGN) * DIRECT_ALIGN;
    block.fill(0, length, padded); // what the file is cut back from at the end
    let off = 0;
    while (!declined && off < padded) {
      try {
        off += (await dio.write(block, off, padded - off, at + off)).bytesWritten;
      } catch (cause) {
        if ((cause as NodeJS.ErrnoException).code !== "EINVAL") throw cause;
        declined = true; // memory or file system not fit for O_DIRECT after all
      }
      if (off % DIRECT_ALIGN !== 0) break; // a short write leaves an unaligned rest: through the page cache
    }
    while (off < length) off += (await handle.write(block, off, length - off, at + off)).bytesWritten;
  };
  // The current block is complete (full, or the output's last): start its write, hand it to the
  // tee meanwhile (both only read it), and go on in the next block once that one's last write
  // is done.
  const ship = async (): Promise<void> => {
    const block = blocks[cur]!;
    opts.signal?.throwIfAborted();
    writing[cur] = put(block, blockAt, used).catch((cause: unknown) => void (failure ??= cause));
    if (opts.tee !== undefined) await opts.tee(block.subarray(0, used));
    blockAt += used;
    used = 0;
    cur = (cur + 1) % blocks.length;
    await writing[cur];
    if (failure !== undefined) throw writeError(path, blockAt, failure);
  };
  const append = (n: number): void => {
    used += n;
    pos += n;
    advance(n);
  };
  const write: AtomicFileOutput["write"] = async (chunk) => {
    for (let off = 0; off < chunk.length; ) {
      const n = Math.min(chunk.length - off, DIRECT_BLOCK - used);
      blocks[cur]!.set(chunk.subarray(off, off + n), used);
      off += n;
      append(n);
      if (used === DIRECT_BLOCK) await ship();
    }
  };
  // No copier: the range is read into the block (from the page cache when the source is cached).
  const copyRange: AtomicFileOutput["copyRange"] = async (_copier, srcFd, srcOffset, length) => {
    for (let done = 0; done < length; ) {
      const n = Math.min(length - done, DIRECT_BLOCK - used);
      await readFully(srcFd, blocks[cur]!.subarray(used, used + n), srcOffset + done);
      done += n;
      append(n);
      if (used === DIRECT_BLOCK) await ship();
    }
    return true;
  };
  return {
    write,
    copyRange,
    finish: async () => {
      if (used > 0) await ship();
      await Promise.all(writing);
      if (failure !== undefined) throw failure;
      if (pos % DIRECT_ALIGN !== 0) await handle.truncate(pos);
    },
    close: async () => {
      if (closed) return;
      closed = true;
      await Promise.all(writing);
      await dio.close().catch(() => undefined);
      // blocks that O_DIRECT refused may be misaligned: not kept for another output
      if (declined) return;
      let kept = spareBlocks.get(alloc);
      if (kept === undefined) spareBlocks.set(alloc, (kept = { blocks: [] }));
      kept.blocks.push(...blocks.splice(0, Math.max(0, KEEP_BLOCKS - kept.blocks.length)));
      clearTimeout(kept.timer);
      kept.timer = setTimeout(() => spareBlocks.delete(alloc), KEEP_SPARE_MS).unref();
    },
  };
}

/** Fills `into` from the open file `fd` at `offset`; a source that ends first is an error. */
async function readFully(fd: number, into: Uint8Array, offset: number): Promise<void> {
  for (let got = 0; got < into.length; ) {
    const n = await new Promise<number>((resolve, reject) => readCb(fd, into, got, into.length - got, offset + got, (err, bytesRead) => (err ? reject(err) : resolve(bytesRead))));
    if (n === 0) throw new FilesError("IO", `the source ended at ${offset + got} (${into.length - got} bytes of the range left)`);
    got += n;
  }
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
