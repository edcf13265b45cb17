/** Machine-readable reasons a mount failed or was refused. */
export type MountErrorCode =
  /** FUSE cannot be used here (not Linux, no /dev/fuse, no daemon binary, no fusermount3); `message` says which. */
  | "FUSE_UNAVAILABLE"
  /** The mount point is not a folder, or not an empty one. */
  | "BAD_MOUNTPOINT"
  /** The mount point already holds a live mount. */
  | "ALREADY_MOUNTED"
  /** The kernel or fusermount3 refused the mount (permissions, a container without FUSE). */
  | "MOUNT_FAILED"
  /** The daemon exited while the mount was in use. */
  | "DAEMON_EXITED"
  /** A file plan that does not describe a file (extents that do not cover it, a read past a source). */
  | "BAD_PLAN"
  /** The daemon refused a file: its source is not the file that was planned any more. */
  | "REJECTED"
  /** A computed tensor's producer gave other than the planned number of bytes. */
  | "BAD_SIDECAR"
  /** What an EROFS image cannot express (more devices than device_id's 16 bits, a block address past 32 bits, a `,` in a device path). */
  | "EROFS_UNSUPPORTED"
  /** An EROFS mount cannot be made here (not root, no daemon, the kernel refused it); `message` says which. */
  | "EROFS_UNAVAILABLE";

/** Every failure this package raises on purpose: a stable `code`, and a message naming the path. */
export class MountError extends Error {
  override readonly name = "MountError";
  constructor(
    readonly code: MountErrorCode,
    message: string,
    /** The mount point, file or source concerned, the daemon's last lines… */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}
