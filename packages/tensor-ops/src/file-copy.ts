/**
 * In-kernel file range copies through the native addon (copy_file_range; the kernel shares
 * extents instead of copying on filesystems that can). Plugs into @compat/gguf's
 * WriteOptions.copyRange without @compat/gguf depending on this package.
 */
import type { RangeCopier } from "@compat/gguf";
import { TensorOpsError } from "./errors";
import { nativeAddon } from "./native";

/** Largest piece per native call: the call is synchronous, so the event loop gets a turn between pieces. */
const PIECE = 256 * 1024 * 1024;

/** Filesystem block size assumed for extent sharing (XFS and Btrfs defaults; larger blocks are multiples of it). */
const BLOCK = 4096;

/** Errors that mean "this kernel or filesystem pair cannot do it": fall back to read/write. */
const DECLINED = new Set([1 /* EPERM */, 9 /* EBADF */, 18 /* EXDEV */, 22 /* EINVAL */, 38 /* ENOSYS */, 95 /* EOPNOTSUPP */]);

/**
 * A copier for WriteOptions.copyRange, or undefined when the addon (or its copy function) is
 * unavailable or COMPAT_TENSOR_OPS=js. It resolves false when the kernel declines before any
 * byte was copied; a failure or a short copy midway (source truncated) throws.
 */
export function kernelRangeCopier(): RangeCopier | undefined {
  const addon = nativeAddon();
  const copy = addon?.copyFileRange;
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
      const n = copy(srcFd, srcOffset + done, dstFd, dstOffset + done, want);
      if (n < 0) {
        if (done === 0 && DECLINED.has(-n)) return false;
        throw new TensorOpsError("COPY_FAILED", `copy_file_range failed after ${done} of ${length} bytes (errno ${-n})`);
      }
      if (n < want) throw new TensorOpsError("COPY_FAILED", `copy_file_range: source ended after ${done + n} of ${length} bytes`);
      done += n;
      if (done < length) await new Promise((r) => setImmediate(r));
    }
    return true;
  };
}

/**
 * Shares `length` bytes of one file with another (FICLONERANGE reflink: Btrfs, XFS). Returns
 * 0 on success or a negative errno (ext4 and tmpfs refuse with EOPNOTSUPP or EXDEV/EINVAL).
 * Offsets and length must be multiples of the filesystem block size.
 */
export function cloneFileRange(srcFd: number, srcOffset: number, dstFd: number, dstOffset: number, length: number): number {
  const clone = nativeAddon()?.cloneRange;
  return clone === undefined ? -95 : clone(srcFd, srcOffset, dstFd, dstOffset, length);
}
