// Browser stand-in for file-source.ts and atomic-file.ts: the browser build maps both here,
// so a bundle never pulls in node:fs. Paths are a Node feature; Blobs and buffers work everywhere.
import { GgufError } from "./errors";
import type { ByteSource } from "./types";

const unsupported = (path: string, what: string): GgufError =>
  new GgufError("IO", `${what} a file path needs Node.js; in a browser pass a File, Blob or buffer`, { source: path });

export async function fileSource(path: string): Promise<ByteSource> {
  throw unsupported(path, "reading");
}

export async function writeFileAtomic(path: string): Promise<number> {
  throw unsupported(path, "writing");
}

export async function replaceAtomically(path: string): Promise<void> {
  throw unsupported(path, "writing");
}

export async function sweepTempFiles(dir: string, _opts?: { name?: string; olderThanMs?: number }): Promise<string[]> {
  throw unsupported(dir, "sweeping");
}

export function tempPathFor(path: string): string {
  throw unsupported(path, "staging");
}
