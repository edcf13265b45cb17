import { FilesError, writeFileAtomic } from "@compat/files";
import { GgufError } from "./errors";
import { layoutGguf, type GgufLayout } from "./layout";
import type { GgufModel } from "./model";
import type { GgufTensor, RangeCopier } from "./types";
import { CopyBuffers, streamTensorData } from "./tensor-data";

/** Anything with a write(chunk) method; a returned promise is awaited. */
export interface GgufSink {
  write(chunk: Uint8Array): unknown;
}

/** Duck-typed Node.js Writable (so this module does not depend on node:stream). */
interface NodeWritableLike {
  write(chunk: Uint8Array, cb: (err?: Error | null) => void): boolean;
  once(event: string, listener: (...args: unknown[]) => void): unknown;
}

export type WriteTarget = string | GgufSink | WritableStream<Uint8Array>;

export interface WriteOptions {
  /** Called after each chunk with bytes written so far and the total. */
  onProgress?(written: number, total: number): void;
  signal?: AbortSignal;
  /** This model's layoutGguf() result, when the caller already has it (it is not laid out again). */
  layout?: GgufLayout;
  /** Lay out with layoutGguf's `shareBlocks` (when `layout` is not given): untouched ranges can share extents. */
  shareBlocks?: boolean;
  /**
   * Optional in-kernel copier for tensors that are untouched ranges of a local file, used
   * when writing to a path (e.g. @compat/tensor-ops' kernelRangeCopier()). When it declines,
   * those bytes are copied through memory as without it.
   */
  copyRange?: RangeCopier;
}

export interface WriteResult {
  bytesWritten: number;
  layout: GgufLayout;
}

type Emit = (chunk: Uint8Array) => Promise<void>;
/** Appends `length` bytes of the source starting at a range tensor's bytes without reading them into JS; false when it cannot. */
type DirectCopy = (t: GgufTensor, length: number) => Promise<boolean>;

/**
 * Index of the last tensor of the run starting at `first` whose bytes, with the output's
 * padding between them, are one contiguous stretch of one source: each next tensor sits in the
 * source where the output puts it, and the source's padding bytes are zeros as the output's are.
 */
async function sourceRunEnd(model: GgufModel, layout: GgufLayout, first: number): Promise<number> {
  const a = model.tensors[first]!.data;
  if (a.kind !== "range") return first;
  let last = first;
  for (let k = first + 1; k < model.tensors.length; k++) {
    const d = model.tensors[k]!.data;
    const prev = model.tensors[k - 1]!.data;
    if (d.kind !== "range" || prev.kind !== "range" || d.source !== a.source) break;
    const rel = layout.tensorOffsets[k]! - layout.tensorOffsets[first]!;
    if (d.offset !== a.offset + rel || d.length !== layout.tensorSizes[k] || d.length === 0) break;
    const gapAt = prev.offset + prev.length;
    const gap = d.offset - gapAt;
    if (gap > 0 && !(await d.source.read(gapAt, gap)).every((b) => b === 0)) break;
    last = k;
  }
  return last;
}

async function emitModel(model: GgufModel, layout: GgufLayout, emit: Emit, opts: WriteOptions, buffers?: CopyBuffers, direct?: DirectCopy): Promise<number> {
  let written = 0;
  const out = async (chunk: Uint8Array): Promise<void> => {
    opts.signal?.throwIfAborted();
    await emit(chunk);
    written += chunk.length;
    opts.onProgress?.(written, layout.totalSize);
  };
  await out(layout.header);
  let zeros = new Uint8Array(0);
  const pad = async (size: number): Promise<void> => {
    const n = (layout.alignment - (size % layout.alignment)) % layout.alignment;
    if (n === 0) return;
    if (zeros.length < n) zeros = new Uint8Array(Math.min(n, 1 << 20));
    for (let left = n; left > 0; left -= zeros.length) await out(zeros.subarray(0, Math.min(left, zeros.length)));
  };
  for (let i = 0; i < model.tensors.length; ) {
    const t = model.tensors[i]!;
    const size = layout.tensorSizes[i]!;
    const expectedAt = layout.dataOffset + layout.tensorOffsets[i]!;
    if (written !== expectedAt) throw new GgufError("DATA_LENGTH", `internal: tensor "${t.name}" would start at ${written}`, { expected: `${expectedAt}` });
    if (direct !== undefined && size > 0 && t.data.kind === "range" && t.data.source.fd !== undefined) {
      // One kernel copy for a run of tensors that lie back to back in the source exactly as in
      // the output (zero padding included): fewer calls, and extents shared across tensor bounds.
      const last = await sourceRunEnd(model, layout, i);
      const span = layout.tensorOffsets[last]! + layout.tensorSizes[last]! - layout.tensorOffsets[i]!;
      opts.signal?.throwIfAborted();
      if (await direct(t, span)) {
        written += span;
        opts.onProgress?.(written, layout.totalSize);
        await pad(layout.tensorSizes[last]!);
        i = last + 1;
        continue;
      }
      direct = undefined; // declined (another filesystem, no kernel support): read/write from here on
    }
    await streamTensorData(t, size, out, buffers);
    await pad(size);
    i++;
  }
  if (written !== layout.totalSize) {
    throw new GgufError("DATA_LENGTH", `wrote ${written} bytes`, { expected: `${layout.totalSize} bytes` });
  }
  return written;
}

function isNodeWritable(x: unknown): x is NodeWritableLike {
  return typeof x === "object" && x !== null && typeof (x as NodeWritableLike).write === "function" && typeof (x as NodeWritableLike).once === "function";
}

function isWebWritable(x: unknown): x is WritableStream<Uint8Array> {
  return typeof x === "object" && x !== null && typeof (x as WritableStream).getWriter === "function";
}

/**
 * Write a model as a GGUF file: header, then each tensor's data in order, padded.
 * A path is written atomically (temp file + fsync + rename). Streams are written to
 * but not closed. Memory use is bounded by one tensor (ranges are copied in chunks).
 */
export async function writeGguf(model: GgufModel, target: WriteTarget, opts: WriteOptions = {}): Promise<WriteResult> {
  const layout = opts.layout ?? layoutGguf(model, { shareBlocks: opts.shareBlocks === true });
  if (typeof target === "string") {
    // The file sink is done with each chunk when its write resolves, so copy buffers can be reused.
    const copier = opts.copyRange;
    const bytesWritten = await writeFileAtomic(target, async ({ write, copyRange }) => {
      // Once the copier declines (another filesystem, no kernel support), stop asking it.
      let usable = copier !== undefined;
      const direct: DirectCopy | undefined =
        copier === undefined
          ? undefined
          : async (t, length) => {
              const d = t.data;
              if (!usable || d.kind !== "range" || d.source.fd === undefined) return false;
              if (d.offset + length > d.source.size) return false; // let the read path report the truncation
              try {
                usable = await copyRange(copier, d.source.fd, d.offset, length);
              } catch (cause) {
                // A source that shrank under us is the source's fault: let its own read say so
                // (TRUNCATED, naming the source); any other failure stays a write error.
                await d.source.read(d.offset + length - 1, 1);
                throw cause;
              }
              return usable;
            };
      await emitModel(model, layout, write, opts, new CopyBuffers(), direct);
    }).catch((e: unknown) => {
      // a failed write is this package's IO error, as every failure of a GGUF operation
      throw e instanceof FilesError ? new GgufError("IO", e.reason, { source: target, offset: e.details.offset, cause: e.cause }) : e;
    });
    return { bytesWritten, layout };
  }
  if (isWebWritable(target)) {
    const writer = target.getWriter();
    try {
      const bytesWritten = await emitModel(model, layout, async (c) => {
        await writer.ready;
        await writer.write(c);
      }, opts);
      return { bytesWritten, layout };
    } finally {
      writer.releaseLock();
    }
  }
  if (isNodeWritable(target)) {
    const bytesWritten = await emitModel(
      model,
      layout,
      (c) => new Promise<void>((resolve, reject) => void target.write(c, (err) => (err ? reject(err) : resolve()))),
      opts,
    );
    return { bytesWritten, layout };
  }
  const sink = target as GgufSink;
  const bytesWritten = await emitModel(model, layout, async (c) => {
    await sink.write(c);
  }, opts);
  return { bytesWritten, layout };
}

/** The whole file in memory; meant for small models and tests. The same emitter as writeGguf. */
export async function serializeGguf(model: GgufModel): Promise<Uint8Array<ArrayBuffer>> {
  const layout = layoutGguf(model);
  const out = new Uint8Array(layout.totalSize);
  let at = 0;
  await emitModel(model, layout, async (chunk) => {
    out.set(chunk, at);
    at += chunk.length;
  }, {});
  return out;
}
