/** Everything the store can refuse, each with a stable `code` for programs and a message for people. */
export type StoreErrorCode =
  | "INVALID_REFERENCE" // not an Ollama model name, nor a file
  | "UNKNOWN_MODEL" // a valid name with no manifest in the store
  | "CORRUPT_MANIFEST" // the manifest is not the JSON Ollama writes
  | "MISSING_BLOB" // a layer the manifest names is not in blobs/
  | "UNSAFE_BLOB" // a blob is not a plain file of the store: a symlink out of it, a FIFO or device, or too large for its media type
  | "DIGEST_MISMATCH" // the blob's sha256 is not the one in its name (checked with verifyDigest)
  | "NO_MODEL_LAYER" // the manifest has no GGUF model layer (e.g. a safetensors-only model)
  | "COMPAT_DISABLED" // OLLAMA_LLAMA_CPP_COMPAT=0 and a command whose only job is translating (migrate)
  | "STORE_UNWRITABLE" // the store cannot be written (read-only file system, no permission) and the command rewrites it
  | "INVALID_CREATE" // a create request the store cannot carry out as given (an adapter that is not a GGUF LoRA blob of the store, …)
  | "NO_SPACE"; // not enough free space for what the command would write; checked before writing

export class StoreError extends Error {
  override readonly name = "StoreError";

  constructor(
    readonly code: StoreErrorCode,
    message: string,
    /** Extra facts: the reference, manifest, blob… */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}
