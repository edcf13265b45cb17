import { GgufError } from "./errors";
import type { ByteSource } from "./types";

/** Refuses a read that is not whole, non-negative offsets and lengths within `size` (TRUNCATED when it runs past the end). */
export function checkRange(name: string, size: number, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new GgufError("IO", `invalid read of ${length} bytes at ${offset}`, { source: name });
  }
  if (offset + length > size) {
    throw new GgufError("TRUNCATED", `read of ${length} bytes at ${offset} runs past the end (${size} bytes)`, {
      source: name,
      offset,
      expected: `at least ${offset + length} bytes`,
    });
  }
}

/** Bytes already in memory. Reads return views (no copy); do not mutate them. */
export function bufferSource(bytes: Uint8Array | ArrayBuffer, name = "<buffer>"): ByteSource {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  return {
    name,
    size: view.length,
    read(offset, length) {
      checkRange(name, view.length, offset, length);
      return Promise.resolve(view.subarray(offset, offset + length));
    },
  };
}

/** A browser Blob or File; reads only the slices asked for. */
export function blobSource(blob: Blob): ByteSource {
  const name = typeof (blob as { name?: unknown }).name === "string" ? (blob as File).name : "<blob>";
  return {
    name,
    size: blob.size,
    async read(offset, length) {
      checkRange(name, blob.size, offset, length);
      const buf = await blob.slice(offset, offset + length).arrayBuffer();
      if (buf.byteLength !== length) {
        throw new GgufError("TRUNCATED", `short read: got ${buf.byteLength} of ${length} bytes`, { source: name, offset });
      }
      return new Uint8Array(buf);
    },
  };
}

export function isByteSource(x: unknown): x is ByteSource {
  return (
    typeof x === "object" &&
    x !== null &&
    typeof (x as ByteSource).read === "function" &&
    typeof (x as ByteSource).size === "number" &&
    typeof (x as ByteSource).name === "string"
  );
}
