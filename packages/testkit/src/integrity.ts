/**
 * Source integrity for tests: the source file is never modified. Take a guard before
 * the operation, call `assertUnchanged()` after it; the digest is SHA-256 of the bytes.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";

export async function fileDigest(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

export interface SourceGuard {
  readonly path: string;
  readonly digest: string;
  readonly size: number;
  /** Throws (naming the file) if its size or digest differ from when the guard was taken. */
  assertUnchanged(): Promise<void>;
}

export class SourceModifiedError extends Error {
  readonly code = "SOURCE_MODIFIED";
  constructor(message: string) {
    super(message);
    this.name = "SourceModifiedError";
  }
}

export async function guardSource(path: string): Promise<SourceGuard> {
  const size = (await stat(path)).size;
  const digest = await fileDigest(path);
  return {
    path,
    digest,
    size,
    async assertUnchanged() {
      const now = (await stat(path)).size;
      if (now !== size) throw new SourceModifiedError(`${path}: size changed from ${size} to ${now} bytes`);
      const d = await fileDigest(path);
      if (d !== digest) throw new SourceModifiedError(`${path}: contents changed (sha256 ${digest} -> ${d})`);
    },
  };
}
