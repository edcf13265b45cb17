/** Everything the bridge can refuse, each with a stable `code` for programs and a message for people. */
export type BridgeErrorCode =
  | "INVALID_REFERENCE" // not an Ollama model name, nor a file
  | "UNKNOWN_MODEL" // a valid name with no manifest in the store
  | "CORRUPT_MANIFEST" // the manifest is not the JSON Ollama writes
  | "MISSING_BLOB" // a layer the manifest names is not in blobs/
  | "UNSAFE_BLOB" // a blob is not a plain file of the store: a symlink out of it, a FIFO or device, or too large for its media type
  | "DIGEST_MISMATCH" // the blob's sha256 is not the one in its name (checked before a translation, or always with verifyDigest)
  | "SOURCE_CHANGED" // the source file changed while it was translated; nothing was cached
  | "NO_MODEL_LAYER" // the manifest has no GGUF model layer (e.g. a safetensors-only model)
  | "UNSUPPORTED_MODEL" // the model layer is not a GGUF we can read
  | "TRANSLATION_ABORTED" // stopped (signal) while writing a cache entry; nothing was left behind
  | "CACHE_LOCK_TIMEOUT" // another process held the entry's lock for too long
  | "CACHE_UNWRITABLE" // the cache folder cannot be created or written (read-only file system, not a folder, no permission)
  | "COMPAT_DISABLED" // OLLAMA_LLAMA_CPP_COMPAT=0 and a command whose only job is translating (migrate)
  | "STORE_UNWRITABLE" // the Ollama store cannot be written (read-only file system, no permission) and the command rewrites it
  | "NO_SPACE" // not enough free space for what the command would write; checked before writing
  | "LLAMA_SERVER_NOT_FOUND"
  | "PORT_IN_USE"
  | "INSECURE_BIND" // a non-loopback host without an API key or an explicit opt-out
  | "BAD_ARGUMENT" // a llama-server argument the bridge cannot honour (a unix-socket --host, TLS files, an empty --api-key-file)
  | "INVALID_OPTION" // an option out of its range (models-max, keep-alive)
  | "SERVER_START_FAILED" // llama-server exited before it was healthy
  | "SERVER_CRASHED" // llama-server was killed by a signal of its own (SIGSEGV, SIGILL, ...) before it was healthy
  | "SERVER_START_TIMEOUT"; // llama-server did not become healthy in time

export class BridgeError extends Error {
  constructor(
    readonly code: BridgeErrorCode,
    message: string,
    /** Extra facts: the reference, file, exit code, last log lines… */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = "BridgeError";
  }
}
