import { GgufError } from "./errors";
import { tensorDataLength } from "./model";
import type { BytesData, GgufTensor, RangeData } from "./types";

/** Chunk size for copying large source ranges (bounded memory while writing). */
export const COPY_CHUNK = 4 * 1024 * 1024;

function checkLength(name: string, got: number, want: number): void {
  if (got !== want) {
    throw new GgufError("DATA_LENGTH", `tensor "${name}" data produced ${got} bytes`, { expected: `${want} bytes` });
  }
}

/** Bytes of a join's pieces (ComputedData.parts) together. */
export function partsLength(parts: readonly (RangeData | BytesData)[]): number {
  return parts.reduce((n, p) => n + (p.kind === "range" ? p.length : p.bytes.length), 0);
}

/** Checks that a join's pieces hold exactly the tensor's bytes (DATA_LENGTH when not). */
export function checkPartsLength(name: string, parts: readonly (RangeData | BytesData)[], want: number): void {
  checkLength(name, partsLength(parts), want);
}

/** All bytes of one tensor, in memory (the one reader of tensor bytes; `name` is for errors). */
export async function readTensorData(t: Pick<GgufTensor, "name" | "data">): Promise<Uint8Array> {
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
 * Two reusable copy buffers. Only for sinks that are done with a chunk when their write
 * resolves (a file handle): then the next chunk's read overlaps the current one's write.
 */
export class CopyBuffers {
  private pair: [Uint8Array, Uint8Array] | undefined;
  get(): [Uint8Array, Uint8Array] {
    return (this.pair ??= [new Uint8Array(COPY_CHUNK), new Uint8Array(COPY_CHUNK)]);
  }
}

/**
 * Feed a tensor's bytes to `emit` in pieces of at most COPY_CHUNK for ranges (computed data
 * arrives whole), verifying the total equals `expected`.
 */
export async function streamTensorData(
  t: GgufTensor,
  expected: number,
  emit: (chunk: Uint8Array) => Promise<void> | void,
  buffers?: CopyBuffers,
): Promise<void> {
  const d = t.data;
  checkLength(t.name, tensorDataLength(t), expected);
  if (d.kind === "computed" && d.parts !== undefined) {
    // an op that only joins bytes: its pieces, each copied as a range or bytes would be
    checkLength(t.name, partsLength(d.parts), expected);
    for (const part of d.parts) await streamTensorData({ ...t, data: part }, partsLength([part]), emit, buffers);
    return;
  }
  if (d.kind === "range" && buffers !== undefined && d.source.readInto !== undefined && d.length > 0) {
    await copyDoubleBuffered(d.source.readInto.bind(d.source), d.offset, d.length, emit, buffers.get());
    return;
  }
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

/** Reads chunk k+1 into one buffer while chunk k, in the other, is being written. */
async function copyDoubleBuffered(
  readInto: (target: Uint8Array, offset: number) => Promise<void>,
  offset: number,
  length: number,
  emit: (chunk: Uint8Array) => Promise<void> | void,
  [first, second]: [Uint8Array, Uint8Array],
): Promise<void> {
  let current = first.subarray(0, Math.min(COPY_CHUNK, length));
  let spare = second;
  await readInto(current, offset);
  let done = 0;
  while (done < length) {
    const nextAt = done + current.length;
    const nextLength = Math.min(COPY_CHUNK, length - nextAt);
    const next = nextLength > 0 ? spare.subarray(0, nextLength) : undefined;
    const reading = next !== undefined ? readInto(next, offset + nextAt) : undefined;
    // The read-ahead may fail (source truncated) while the write is still awaited: mark it
    // handled now so it is not an unhandled rejection; it is awaited (and thrown) below.
    reading?.catch(() => undefined);
    try {
      await emit(current);
    } finally {
      // never leave a read running into a buffer after a failed write
      await reading?.catch(() => undefined);
    }
    if (reading !== undefined) await reading;
    done = nextAt;
    if (next === undefined) break;
    spare = current.buffer === first.buffer ? first : second;
    current = next;
  }
}
