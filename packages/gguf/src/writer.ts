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
/** Appends a tensor's bytes without reading them into JS; false when it cannot for this tensor. */
type DirectCopy = (t: GgufTensor) => Promise<boolean>;

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
  for (let i = 0; i < model.tensors.length; i++) {
    const t = model.tensors[i]!;
    const size = layout.tensorSizes[i]!;
    const expectedAt = layout.dataOffset + layout.tensorOffsets[i]!;
    if (written !== expectedAt) throw new GgufError("DATA_LENGTH", `internal: tensor "${t.name}" would start at ${written}`, { expected: `${expectedAt}` });
    if (direct !== undefined && size > 0) {
      opts.signal?.throwIfAborted();
      if (await direct(t)) {
        written += size;
        opts.onProgress?.(written, layout.totalSize);
      } else await streamTensorData(t, size, out, buffers);
    } else await streamTensorData(t, size, out, buffers);
    const pad = (layout.alignment - (size % layout.alignment)) % layout.alignment;
    if (pad > 0) {
      if (zeros.length < pad) zeros = new Uint8Array(Math.min(pad, 1 << 20));
      for (let left = pad; left > 0; left -= zeros.length) await out(zeros.subarray(0, Math.min(left, zeros.length)));
    }
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
  const layout = opts.layout ?? layoutGguf(model);
  if (typeof target === "string") {
    const { writeFileAtomic } = await import("./file-sink");
    // The file sink is done with each chunk when its write resolves, so copy buffers can be reused.
    const copier = opts.copyRange;
    const bytesWritten = await writeFileAtomic(target, async (write, copy) => {
      // Once the copier declines (another filesystem, no kernel support), stop asking it.
      let usable = copier !== undefined;
      const direct: DirectCopy | undefined =
        copier === undefined
          ? undefined
          : async (t) => {
              const d = t.data;
              if (!usable || d.kind !== "range" || d.source.fd === undefined) return false;
              if (d.offset + d.length > d.source.size) return false; // let the read path report the truncation
              try {
                usable = await copy(copier, d.source.fd, d.offset, d.length);
              } catch (cause) {
                // A source that shrank under us is the source's fault: let its own read say so
                // (TRUNCATED, naming the source); any other failure stays a write error.
                await d.source.read(d.offset + d.length - 1, 1);
                throw cause;
              }
              return usable;
            };
      await emitModel(model, layout, write, opts, new CopyBuffers(), direct);
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
