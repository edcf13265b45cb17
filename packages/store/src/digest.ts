import { basename } from "node:path";
import { StoreError } from "./errors";

/**
 * A sha256 digest as Ollama spells it: `sha256:<hex>` in manifests and APIs, `sha256-<hex>` as a
 * blob's file name (64 hex digits; either case is read, lower case is written). The one pattern
 * every reader of the store, the cache and the API uses.
 */
const DIGEST = /^sha256[:-]([0-9a-fA-F]{64})$/;

/** `d` in Ollama's canonical form, `sha256:<lower-case hex>`, or undefined when it is not a sha256 digest. */
export function canonicalDigest(d: string): string | undefined {
  const m = DIGEST.exec(d);
  return m ? `sha256:${m[1]!.toLowerCase()}` : undefined;
}

/**
 * `sha256:<hex>` from a blob's file name (`blobs/sha256-<hex>`), else undefined: the digest its
 * bytes must have. Only the file's own name counts, never a folder named like a blob.
 */
export function blobDigest(path: string): string | undefined {
  const m = /^sha256-([0-9a-f]{64})$/.exec(basename(path));
  return m ? `sha256:${m[1]}` : undefined;
}

/** `sha256:<hex>` → `sha256-<hex>`, the blob's file name; anything else is refused. */
export function blobFileName(digest: string): string {
  const d = canonicalDigest(digest);
  if (d === undefined) throw new StoreError("CORRUPT_MANIFEST", `"${digest}" is not a sha256 digest (sha256:<64 hex digits>)`, { digest });
  return `sha256-${d.slice("sha256:".length)}`;
}
