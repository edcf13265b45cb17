// A GGUF header as plain bytes: the baseline the header parsers are timed against.
import { open } from "node:fs/promises";
import { layoutGguf, readGguf } from "@compat/gguf";

/** How many bytes the header of `path` takes (where its tensor data starts). */
export async function headerLength(path) {
  const model = await readGguf(path);
  try {
    return layoutGguf(model).dataOffset;
  } finally {
    await model.close();
  }
}

/** One read of the first `length` bytes of `path` into a new buffer. */
export async function readHeaderBytes(path, length) {
  const fh = await open(path, "r");
  try {
    const buf = new Uint8Array(length);
    await fh.read(buf, 0, length, 0);
    return buf;
  } finally {
    await fh.close();
  }
}
