// Node-only: atomic file output. Kept apart so browser bundles do not pull in node:fs.
import { randomBytes } from "node:crypto";
import { open, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { GgufError } from "./errors";

/**
 * Write a file atomically: `produce` streams chunks into a temp file in the same directory,
 * which is fsynced and renamed over `path`. On any error the temp file is removed.
 */
export async function writeFileAtomic(path: string, produce: (write: (chunk: Uint8Array) => Promise<void>) => Promise<void>): Promise<number> {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  let fh;
  try {
    fh = await open(tmp, "wx");
  } catch (cause) {
    throw new GgufError("IO", `cannot create temp file next to ${path}: ${(cause as Error).message}`, { source: path, cause });
  }
  let pos = 0;
  let done = false;
  try {
    const handle = fh;
    await produce(async (chunk) => {
      let off = 0;
      while (off < chunk.length) {
        const { bytesWritten } = await handle.write(chunk, off, chunk.length - off, pos);
        off += bytesWritten;
        pos += bytesWritten;
      }
    });
    await handle.sync();
    await handle.close();
    fh = undefined;
    await rename(tmp, path);
    done = true;
  } finally {
    if (fh !== undefined) await fh.close().catch(() => undefined);
    if (!done) await unlink(tmp).catch(() => undefined);
  }
  return pos;
}
