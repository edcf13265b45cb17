import type { ByteSource } from "./types";

/**
 * A local file as a ByteSource (Node only). Loaded lazily so that importing this package
 * in a browser never touches node:fs.
 */
export async function fileSource(path: string): Promise<ByteSource> {
  const m = await import("./file-source");
  return m.fileSource(path);
}
