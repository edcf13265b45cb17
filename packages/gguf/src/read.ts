import { GgufError } from "./errors";
import { GgufModel } from "./model";
import { NeedMoreBytes, Parser, checkTensorOffsets, parseHeader, type ParsedHeader } from "./parse";
import { blobSource, bufferSource, isByteSource } from "./sources";
import type { ByteSource, GgufTensor } from "./types";

export interface ReadOptions {
  /** First read size; the header is then read in growing chunks. Default 1 MiB. */
  initialChunk?: number;
}

export interface ParseOptions {
  /**
   * Real size of the file when `bytes` holds only its beginning. Without it, a buffer that
   * ends at or before the data section is taken to be just the header (tensor ranges are not
   * checked against the end of the file); a longer buffer is taken to be the whole file.
   */
  fileSize?: number;
  /** Source the tensor data ranges should point at (default: a buffer source over `bytes`). */
  source?: ByteSource;
}

export type GgufInput = string | Uint8Array | ArrayBuffer | Blob | ByteSource;

function buildModel(h: ParsedHeader, source: ByteSource, owned: ByteSource[], sizeKnown = true): GgufModel {
  const tensors: GgufTensor[] = h.tensors.map((t) => ({
    name: t.name,
    type: t.type,
    shape: t.shape,
    data: { kind: "range", source, offset: h.dataOffset + t.offset, length: t.byteSize },
  }));
  return new GgufModel({
    version: h.version,
    littleEndian: h.littleEndian,
    kvs: h.kvs,
    kvOffsets: new WeakMap(h.kvs.map((kv, i) => [kv, h.kvOffsets[i]!])),
    tensors,
    source,
    dataOffset: h.dataOffset,
    ownedSources: owned,
    // A tensor-less file that stops right after an unaligned header was written unpadded.
    padEmptyHeader: !(sizeKnown && h.tensors.length === 0 && source.size === h.headerEnd && h.headerEnd % h.alignment !== 0),
  });
}

/**
 * Parse a GGUF header held in memory (the whole file, or at least its header).
 * Tensor data ranges point into `bytes` (or `opts.source`).
 */
export function parseGguf(bytes: Uint8Array | ArrayBuffer, name = "<buffer>", opts: ParseOptions = {}): GgufModel {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const explicit = opts.fileSize !== undefined || opts.source !== undefined;
  const fileSize = opts.fileSize ?? opts.source?.size ?? view.length;
  let h: ParsedHeader;
  try {
    h = parseHeader(view, { name, fileSize, sizeKnown: explicit });
    // A buffer that goes past the header is the whole file: check tensor ranges against it.
    if (!explicit && view.length > h.dataOffset) checkTensorOffsets(h, name, view.length);
  } catch (e) {
    if (e instanceof NeedMoreBytes) {
      throw new GgufError("TRUNCATED", `the header continues past the ${view.length} bytes given`, {
        source: name,
        offset: view.length,
        expected: `at least ${e.minEnd} bytes`,
      });
    }
    throw e;
  }
  const sizeKnown = explicit || view.length > h.dataOffset || h.tensors.length === 0;
  return buildModel(h, opts.source ?? bufferSource(view, name), [], sizeKnown);
}

/** A byte buffer the caller fills completely (Node: without zeroing it first). */
function uninitialized(n: number): Uint8Array {
  const B = (globalThis as { Buffer?: { allocUnsafeSlow(n: number): Uint8Array } }).Buffer;
  if (B === undefined) return new Uint8Array(n);
  const b = B.allocUnsafeSlow(n);
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}

/** Bytes read per step once the header is known to be large; the next step is read while this one is parsed. */
const READ_STEP = 1 << 20;

/**
 * Read the header through a ByteSource in growing chunks: only the header bytes are read.
 * Each new buffer starts where the parser resumes (the entry that was cut), so finished
 * entries are never copied again; they keep viewing the buffer they were parsed from.
 * A buffer is filled in steps, and the parser works on one step while the next is read,
 * so a big vocabulary is walked while the I/O is under way instead of after it.
 */
async function readFromSource(source: ByteSource, owned: ByteSource[], opts: ReadOptions): Promise<GgufModel> {
  const size = source.size;
  const first = Math.min(size, Math.max(64, opts.initialChunk ?? 1 << 20));
  // buf holds the file from `base`; [base, filled) is read, [filled, cap) is room still to fill.
  let buf = await source.read(0, first);
  let base = 0;
  let filled = first;
  let cap = first;
  let ahead: Promise<void> | undefined;
  let aheadEnd = filled;
  const fillStep = (): void => {
    aheadEnd = Math.min(cap, filled + READ_STEP);
    const at = filled;
    const target = buf.subarray(at - base, aheadEnd - base);
    ahead = source.readInto !== undefined ? source.readInto(target, at) : source.read(at, target.length).then((b) => target.set(b));
  };
  const parser = new Parser(buf, { name: source.name, fileSize: size, sizeKnown: true });
  try {
    for (;;) {
      try {
        const h = parser.header();
        if (ahead !== undefined) {
          await ahead;
          ahead = undefined;
          filled = aheadEnd;
        }
        // Room never read stays zero: views of this buffer must not show stale memory.
        buf.fill(0, filled - base);
        return buildModel(h, source, owned);
      } catch (e) {
        if (!(e instanceof NeedMoreBytes)) throw e;
        if (ahead !== undefined) {
          await ahead;
          ahead = undefined;
          filled = aheadEnd;
        }
        if (e.minEnd > cap) {
          // Grow geometrically so a big vocabulary costs a handful of buffers, never past EOF.
          const want = Math.min(size, Math.max(cap * 2, Math.ceil(e.minEnd * 1.25)));
          const keep = parser.resumeAt();
          const next = uninitialized(want - keep);
          next.set(buf.subarray(keep - base, filled - base), 0);
          buf = next;
          base = keep;
          cap = want;
        }
        if (e.minEnd > filled) {
          fillStep();
          await ahead;
          ahead = undefined;
          filled = aheadEnd;
        }
        if (filled < cap) fillStep();
        parser.setBytes(buf.subarray(0, filled - base), base);
      }
    }
  } finally {
    // A failed parse may leave a read in flight: let it settle before the caller closes the source.
    if (ahead !== undefined) await ahead.catch(() => undefined);
  }
}

/**
 * Read a GGUF file's header from a path (Node), bytes, a Blob/File, or any ByteSource.
 * Tensor data is not read; each tensor gets a byte range of the source. For a path,
 * the file stays open for those ranges until `model.close()`.
 */
export async function readGguf(input: GgufInput, opts: ReadOptions = {}): Promise<GgufModel> {
  if (input instanceof Uint8Array || input instanceof ArrayBuffer) {
    const view = input instanceof Uint8Array ? input : new Uint8Array(input);
    return buildModel(parseHeader(view, { name: "<buffer>", fileSize: view.length, sizeKnown: true }), bufferSource(view), []);
  }
  if (typeof input === "string") {
    const { fileSource } = await import("./file-source");
    const source = await fileSource(input);
    try {
      return await readFromSource(source, [source], opts);
    } catch (e) {
      await source.close?.();
      throw e;
    }
  }
  if (isByteSource(input)) return readFromSource(input, [], opts);
  if (typeof Blob !== "undefined" && input instanceof Blob) return readFromSource(blobSource(input), [], opts);
  throw new GgufError("IO", "readGguf: unsupported input", { expected: "a path, Uint8Array, ArrayBuffer, Blob or ByteSource" });
}
