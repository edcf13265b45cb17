import { GgufError } from "./errors";
import type { GgufTensor, TensorData } from "./types";

/** Chunk size for copying large source ranges (bounded memory while writing). */
export const COPY_CHUNK = 16 * 1024 * 1024;

function lengthOf(d: TensorData): number {
  return d.kind === "bytes" ? d.bytes.length : d.length;
}

function checkLength(name: string, got: number, want: number): void {
  if (got !== want) {
    throw new GgufError("DATA_LENGTH", `tensor "${name}" data produced ${got} bytes`, { expected: `${want} bytes` });
  }
}

/** All bytes of one tensor, in memory. */
export async function readTensorData(t: GgufTensor): Promise<Uint8Array> {
  const d = t.data;
  switch (d.kind) {
    case "bytes":
      return d.bytes;
    case "range": {
      const out = await d.source.read(d.offset, d.length);
      checkLength(t.name, out.length, d.length);
      return out;
    }
    case "computed": {
      const out = await d.produce();
      checkLength(t.name, out.length, d.length);
      return out;
    }
  }
}

/**
 * Feed a tensor's bytes to `emit` in pieces of at most COPY_CHUNK for ranges (computed data
 * arrives whole), verifying the total equals `expected`.
 */
export async function streamTensorData(t: GgufTensor, expected: number, emit: (chunk: Uint8Array) => Promise<void> | void): Promise<void> {
  const d = t.data;
  checkLength(t.name, lengthOf(d), expected);
  if (d.kind === "range") {
    let done = 0;
    while (done < d.length) {
      const n = Math.min(COPY_CHUNK, d.length - done);
      const chunk = await d.source.read(d.offset + done, n);
      checkLength(t.name, chunk.length, n);
      await emit(chunk);
      done += n;
    }
    return;
  }
  const bytes = await readTensorData(t);
  checkLength(t.name, bytes.length, expected);
  await emit(bytes);
}
