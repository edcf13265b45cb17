// Browser stand-in for file-source.ts and @compat/files: the browser build maps both here,
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

/** Never thrown in a browser (writeFileAtomic throws GgufError there); the writer's instanceof needs the class. */
export class FilesError extends Error {
  readonly reason = "";
  readonly details: { offset?: number } = {};
}
