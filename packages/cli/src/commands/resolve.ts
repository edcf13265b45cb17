import { statSync } from "node:fs";
import { join, resolve } from "node:path";
import type { CliIo } from "../io";

/**
 * The bridge's rule for a FILE-or-MODEL argument (@compat/store `isPathLike`), spelled
 * out so that `inspect FILE` loads no store code (a test keeps the two equal): a word with no
 * path separator and no `.gguf` ending is a model name, always; anything else is a file when
 * something exists there; otherwise a model name if it parses as one.
 */
export function isPathLike(ref: string): boolean {
  return /[\\/]/.test(ref) || /\.gguf$/i.test(ref);
}

/** A FILE-or-MODEL argument, read: the GGUF to open, and what an output must never replace. */
export interface Input {
  path: string;
  /** The file itself; for a store model, the blobs llama.cpp reads (weights, projectors, adapters, draft). */
  files: string[];
  /** For a store model: the store's blobs/ folder, every file of which is Ollama's. */
  storeBlobs?: string;
}

export async function resolveInput(ref: string, io: CliIo): Promise<Input> {
  // a regular file needs no store code, so `inspect FILE` stays light; anything else at that
  // path (a folder, a FIFO that would block the open for good) is the bridge's to refuse
  if (isPathLike(ref) && regularFile(ref)) return { path: ref, files: [resolve(ref)] };
  const { ModelStore } = await import("@compat/store");
  const store = new ModelStore(undefined, io.env);
  const m = await store.resolve(ref);
  const files = [m.modelPath, ...m.projectors, ...m.adapters, ...(m.draft !== undefined ? [m.draft] : [])];
  return { path: m.modelPath, files, ...(m.kind === "store" ? { storeBlobs: join(store.root, "blobs") } : {}) };
}

function regularFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}
