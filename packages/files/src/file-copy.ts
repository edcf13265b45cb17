/**
 * In-kernel file range copies: the copy loop around a call that copies between two open files
 * in the kernel (copy_file_range; filesystems that can share extents instead of copying). The
 * call itself is native code, which @compat/tensor-ops' addon provides (its nativeFileCopy()),
 * so this package stays plain JS and the writers (@compat/gguf's WriteOptions.copyRange,
 * writeFileAtomic's copyRange) take the copier without depending on the addon.
 */
import type { RangeCopier } from "./atomic-file";
import { FilesError } from "./errors";

/**
 * One kernel copy of `length` bytes between open files at the given offsets: the bytes copied
 * (fewer only where the source ends), or -errno when the kernel refused. Either synchronous or
 * a promise (the copy running on another thread, as @compat/tensor-ops' addon does it).
 */
export type KernelCopy = (srcFd: number, srcOffset: number, dstFd: number, dstOffset: number, length: number) => number | Promise<number>;

/** Largest piece per kernel call: a synchronous call holds the event loop, which gets a turn between pieces. */
const PIECE = 256 * 1024 * 1024;

/** Filesystem block size assumed for extent sharing (XFS and Btrfs defaults; larger blocks are multiples of it). */
const BLOCK = 4096;

/** Errors that mean "this kernel or filesystem pair cannot do it": fall back to read/write. */
const DECLINED = new Set([1 /* EPERM */, 9 /* EBADF */, 18 /* EXDEV */, 22 /* EINVAL */, 38 /* ENOSYS */, 95 /* EOPNOTSUPP */]);

/**
 * A RangeCopier over `copy`, or undefined when there is no kernel call (no addon, or
 * COMPAT_TENSOR_OPS=js). It resolves false when the kernel declines before any byte was
 * copied; a failure or a short copy midway (source truncated) throws a FilesError `IO`.
 */
export function kernelRangeCopier(copy: KernelCopy | undefined): RangeCopier | undefined {
  if (copy === undefined) return undefined;
  return async (srcFd, srcOffset, dstFd, dstOffset, length) => {
    // Filesystems share extents (reflink) only from block-aligned offsets on both sides, and
    // copy_file_range copies a whole call's range when its start is not: when both sides sit at
    // the same place within a block, the unaligned head goes in a call of its own.
    const head = (BLOCK - (srcOffset % BLOCK)) % BLOCK;
    const first = head > 0 && head < length && srcOffset % BLOCK === dstOffset % BLOCK ? head : PIECE;
    let done = 0;
    while (done < length) {
      const want = Math.min(done === 0 ? first : PIECE, length - done);
      const n = await copy(srcFd, srcOffset + done, dstFd, dstOffset + done, want);
      if (n < 0) {
        if (done === 0 && DECLINED.has(-n)) return false;
        throw new FilesError("IO", `copy_file_range failed after ${done} of ${length} bytes (errno ${-n})`);
      }
      if (n < want) throw new FilesError("IO", `copy_file_range: source ended after ${done + n} of ${length} bytes`);
      done += n;
      if (done < length) await new Promise((r) => setImmediate(r));
    }
    return true;
  };
}
