/** Machine-readable reasons a file or lock operation failed. */
export type FilesErrorCode =
  | "IO" // a write failed (no space, quota, file size limit, no such folder, ...)
  | "LOCK_TIMEOUT" // a live owner held the lock for longer than the caller would wait
  | "ABORTED"; // the caller's signal stopped the wait for a lock

export interface FilesErrorDetails {
  /** The file written or locked. */
  source?: string;
  /** Bytes written when a write failed. */
  offset?: number;
  /** Extra facts: the lock's owner, ... */
  [fact: string]: unknown;
  cause?: unknown;
}

/** Every failure this package raises on purpose is a FilesError with a stable `code`. */
export class FilesError extends Error {
  override readonly name = "FilesError";
  /** The message without the file and offset in front, for a package that reports it in its own error. */
  readonly reason: string;

  constructor(
    readonly code: FilesErrorCode,
    reason: string,
    readonly details: FilesErrorDetails = {},
  ) {
    super(formatMessage(reason, details), details.cause === undefined ? undefined : { cause: details.cause });
    this.reason = reason;
  }
}

function formatMessage(message: string, d: FilesErrorDetails): string {
  const where: string[] = [];
  if (d.source !== undefined) where.push(d.source);
  if (d.offset !== undefined) where.push(`offset ${d.offset}`);
  return where.length > 0 ? `${where.join(" @ ")}: ${message}` : message;
}
