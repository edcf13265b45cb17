import { FilesError, writeFileAtomic } from "@compat/files";
import { GgufError } from "./errors";
import { layoutGguf, type GgufLayout } from "./layout";
import type { GgufModel } from "./model";
import type { RangeCopier, RangeData } from "./types";
import { checkPartsLength, CopyBuffers, partsLength, streamTensorData } from "./tensor-data";

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
   * when writing to a path (e.g. kernelRangeCopier(nativeFileCopy()), @compat/files' loop over @compat/tensor-ops' kernel call). When it declines,
   * those bytes are copied through memory as without it.
   */
  copyRange?: RangeCopier;
  /**
   * Sees every chunk written through memory (header, padding, computed and copied-through
   * bytes, and with direct writes the copied ranges too), in output order, before it is
   * written; a returned promise is awaited. With a wrapped `copyRange` it lets a caller hash the
   * output as it is made: each byte passes either here or through a copy the copier made. Only
   * when writing to a path (writeFileAtomic's `tee`).
   */
  tee?(chunk: Uint8Array): unknown;
  /**
   * Memory aligned to 4096 bytes for direct writes (e.g. @compat/tensor-ops' alignedBytes): with
   * it, writing to a path on ext4 assembles the file in aligned blocks written with O_DIRECT
   * instead of copying ranges in the kernel (@compat/files' writeFileAtomic says when). Only
   * when writing to a path.
   */
  alignedBytes?(length: number): Uint8Array | undefined;
}

export interface WriteResult {
  bytesWritten: number;
  layout: GgufLayout;
}

type Emit = (chunk: Uint8Array) => Promise<void>;
/** Appends `length` bytes of the source from a range's start without reading them into JS; false when it cannot. */
type DirectCopy = (d: RangeData, length: number) => Promise<boolean>;

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

/** Emits the model's bytes by walking its layout's extents: the header, each tensor's data, zero padding. */
async function emitModel(model: GgufModel, layout: GgufLayout, emit: Emit, opts: WriteOptions, buffers?: CopyBuffers, direct?: DirectCopy): Promise<number> {
  let written = 0;
  const out = async (chunk: Uint8Array): Promise<void> => {
    opts.signal?.throwIfAborted();
    await emit(chunk);
    written += chunk.length;
    opts.onProgress?.(written, layout.totalSize);
  };
  let zeros = new Uint8Array(0);
  const extents = layout.extents;
  for (let e = 0; e < extents.length; e++) {
    const x = extents[e]!;
    if (written !== x.at) throw new GgufError("DATA_LENGTH", `internal: ${x.kind} extent ${e} would start at ${written}`, { expected: `${x.at}` });
    if (x.kind === "header") {
      await out(layout.header);
      continue;
    }
    if (x.kind === "padding") {
      if (zeros.length < x.length) zeros = new Uint8Array(Math.min(x.length, 1 << 20));
      for (let left = x.length; left > 0; left -= zeros.length) await out(zeros.subarray(0, Math.min(left, zeros.length)));
      continue;
    }
    const t = model.tensors[x.index]!;
    const d = t.data;
    if (direct !== undefined && d.kind === "computed" && d.parts !== undefined) {
      // an op that only joins bytes: each piece that is a range of a local file copied in the kernel
      checkPartsLength(t.name, d.parts, x.length);
      for (const part of d.parts) {
        if (direct !== undefined && part.kind === "range" && part.length > 0 && part.source.fd !== undefined) {
          opts.signal?.throwIfAborted();
          if (await direct(part, part.length)) {
            written += part.length;
            opts.onProgress?.(written, layout.totalSize);
            continue;
          }
          direct = undefined;
        }
        await streamTensorData({ ...t, data: part }, partsLength([part]), out, buffers);
      }
      continue;
    }
    if (direct !== undefined && x.length > 0 && d.kind === "range" && d.source.fd !== undefined) {
      // One kernel copy for a run of tensors that lie back to back in the source exactly as in
      // the output (zero padding included): fewer calls, and extents shared across tensor bounds.
      const last = await sourceRunEnd(model, layout, x.index);
      let end = e;
      while (!(extents[end]!.kind === "tensor" && (extents[end] as { index: number }).index === last)) end++;
      const span = extents[end]!.at + extents[end]!.length - x.at;
      opts.signal?.throwIfAborted();
      if (await direct(d, span)) {
        written += span;
        opts.onProgress?.(written, layout.totalSize);
        e = end; // the padding after the run's last tensor is the next extent
        continue;
      }
      direct = undefined; // declined (another filesystem, no kernel support): read/write from here on
    }
    await streamTensorData(t, x.length, out, buffers);
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
          : async (d, length) => {
              if (!usable || d.source.fd === undefined) return false;
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
    }, { size: layout.totalSize, tee: opts.tee, alignedBytes: opts.alignedBytes, signal: opts.signal }).catch((e: unknown) => {
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
