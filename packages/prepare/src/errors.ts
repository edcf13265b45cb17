/** Everything preparing a model for llama-server can refuse, each with a stable `code` for programs and a message for people. */
export type PrepareErrorCode =
  | "UNSAFE_BLOB" // the model file is not a regular file
  | "DIGEST_MISMATCH" // the blob's sha256 is not the one in its name (checked before a translation)
  | "SOURCE_CHANGED" // the source file changed while it was translated; nothing was cached
  | "UNSUPPORTED_MODEL" // the model layer is not a GGUF we can read
  | "TRANSLATION_ABORTED" // stopped (signal) while writing a cache entry; nothing was left behind
  | "CACHE_LOCK_TIMEOUT" // another process held the entry's lock for too long
  | "CACHE_UNWRITABLE"; // the cache folder cannot be created or written (read-only file system, not a folder, no permission)

export class PrepareError extends Error {
  override readonly name = "PrepareError";

  constructor(
    readonly code: PrepareErrorCode,
    message: string,
    /** Extra facts: the source file, the cache entry, the lock's owner… */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}
