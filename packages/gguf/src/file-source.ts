// Node-only: kept apart so browser bundles that never read paths do not pull in node:fs.
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { GgufError } from "./errors";
import { checkRange } from "./sources";
import type { ByteSource } from "./types";

/** A local file opened read-only; each read fetches exactly the bytes asked for. Call close() when done. */
export async function fileSource(path: string): Promise<ByteSource> {
  let handle;
  try {
    // O_NONBLOCK: opening a FIFO (or device) for reading must not wait for a writer;
    // it is refused just below. Regular files ignore the flag.
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (cause) {
    throw new GgufError("IO", `cannot open: ${(cause as Error).message}`, { source: path, cause });
  }
  const fh = handle;
  const st = await fh.stat();
  if (!st.isFile()) {
    await fh.close();
    throw new GgufError("IO", "not a regular file", { source: path });
  }
  const size = st.size;
  let closed = false;
  const check = (offset: number, length: number): void => {
    if (closed) throw new GgufError("IO", "read after close", { source: path, offset });
    checkRange(path, size, offset, length);
  };
  const fill = async (out: Uint8Array, offset: number): Promise<void> => {
    let done = 0;
    while (done < out.length) {
      let bytesRead: number;
      try {
        ({ bytesRead } = await fh.read(out, done, out.length - done, offset + done));
      } catch (cause) {
        throw new GgufError("IO", `read failed: ${(cause as Error).message}`, { source: path, offset: offset + done, cause });
      }
      if (bytesRead === 0) {
        throw new GgufError("TRUNCATED", `file ended after ${done} of ${out.length} bytes`, { source: path, offset: offset + done });
      }
      done += bytesRead;
    }
  };
  return {
    name: path,
    size,
    fd: fh.fd,
    async read(offset, length) {
      check(offset, length);
      const out = new Uint8Array(length);
      await fill(out, offset);
      return out;
    },
    async readInto(target, offset) {
      check(offset, target.length);
      await fill(target, offset);
    },
    async close() {
      if (closed) return;
      closed = true;
      await fh.close();
    },
  };
}
