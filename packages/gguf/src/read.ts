import { GgufError } from "./errors";
import { GgufModel } from "./model";
import { NeedMoreBytes, Parser, checkTensorOffsets, parseHeader, type ParsedHeader, type StringWalk } from "./parse";
import { blobSource, bufferSource, isByteSource } from "./sources";
import type { ByteSource, GgufTensor } from "./types";

export interface ReadOptions {
  /** First read size; the header is then read in growing chunks. Default 1 MiB. */
  initialChunk?: number;
  /**
   * Where the header's buffers come from: `length` bytes, contents unspecified (every byte is
   * read into or zeroed before the buffer is handed out). Default: Buffer.allocUnsafeSlow in
   * Node, a Uint8Array elsewhere. A caller with cheaper fresh memory passes its allocator
   * (@compat/tensor-ops' largeBytes: huge pages for a vocabulary's megabytes).
   */
  allocate?: (length: number) => Uint8Array;
  /**
   * The string walk compiled (@compat/tensor-ops' nativeStringWalk()): a cold process walks a
   * large vocabulary interpreted; the result is the same either way.
   */
  walkStrings?: StringWalk;
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

/**
 * A header buffer, not zeroed: every byte is read into or zeroed before the buffer is handed
 * out. Zeroing at allocation costs a memset of the whole buffer once memory is recycled, and
 * buffers are sized to end near the header (see readFromSource), so little is left to zero.
 */
function headerBuffer(n: number): Uint8Array {
  const B = (globalThis as { Buffer?: { allocUnsafeSlow(n: number): Uint8Array } }).Buffer;
  if (B === undefined) return new Uint8Array(n);
  const b = B.allocUnsafeSlow(n);
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}

/** Bytes per read once the header is known to be large. */
const READ_STEP = 1 << 20;
/**
 * Reads kept in flight. One read at a time leaves the disk idle during every hand-off
 * (about 0.1 ms each on the thread pool, as long as copying a step from the page cache);
 * with several queued, the reads run back to back while the parser walks the earlier steps.
 */
const READS_IN_FLIGHT = 4;
/**
 * At most how far past the parser's estimate of the current item's end reads go ahead: enough
 * to cover the small entries after a vocabulary, little enough that reads past the header end
 * (waited for before returning) cost next to nothing.
 */
const READ_AHEAD = 256 << 10;

interface PendingRead {
  /** File range [at, end), read into `target`. */
  at: number;
  end: number;
  target: Uint8Array;
  done: Promise<void>;
}

/**
 * A header buffer filled from a ByteSource in steps, several reads in flight, in order.
 * `buf` holds the file from `base`; [base, filled) is read, [filled, issued) is being read.
 */
class SteppedBuffer {
  private inFlight: PendingRead[] = [];
  issued: number;

  constructor(
    private readonly source: ByteSource,
    private readonly allocate: (length: number) => Uint8Array,
    public buf: Uint8Array,
    public base: number,
    public filled: number,
  ) {
    this.issued = filled;
  }

  get cap(): number {
    return this.base + this.buf.length;
  }

  /** Queue reads up to `end` (within the buffer), at most READS_IN_FLIGHT at a time. */
  readAhead(end: number, step = READ_STEP): void {
    const until = Math.min(end, this.cap);
    while (this.issued < until && this.inFlight.length < READS_IN_FLIGHT) {
      const at = this.issued;
      const stop = Math.min(until, at + step);
      const target = this.buf.subarray(at - this.base, stop - this.base);
      const source = this.source;
      const done = source.readInto !== undefined ? source.readInto(target, at) : source.read(at, target.length).then((b) => target.set(b));
      done.catch(() => undefined); // awaited in order by next(); an unawaited failure must not go unhandled
      this.inFlight.push({ at, end: stop, target, done });
      this.issued = stop;
    }
  }

  /** Wait for the oldest read (none for an empty file). */
  async next(): Promise<void> {
    const head = this.inFlight.shift();
    if (head === undefined) return;
    await head.done;
    // Issued before the buffer grew: its bytes still land in the old one.
    if (head.target.buffer !== this.buf.buffer) this.buf.set(head.target, head.at - this.base);
    this.filled = head.end;
  }

  /** Let every read in flight finish (before the buffer is handed out). */
  async drain(): Promise<void> {
    while (this.inFlight.length > 0) await this.next();
  }

  async settle(): Promise<void> {
    await Promise.all(this.inFlight.map((r) => r.done.catch(() => undefined)));
    this.inFlight = [];
  }

  /**
   * Move to a bigger buffer that starts at `keep`. Reads in flight finish into the old
   * buffer and are copied over as they are awaited, so growing never waits for the disk.
   */
  grow(keep: number, end: number): void {
    // Entries already parsed keep viewing the old buffer: its room no read will reach is zeroed.
    this.buf.fill(0, this.issued - this.base);
    const next = this.allocate(end - keep);
    next.set(this.buf.subarray(keep - this.base, this.filled - this.base), 0);
    this.buf = next;
    this.base = keep;
  }
}

/**
 * Read the header through a ByteSource in growing chunks: only the header bytes are read.
 * Each new buffer starts where the parser resumes (the entry that was cut), so finished
 * entries are never copied again; they keep viewing the buffer they were parsed from.
 * A buffer is filled in steps, and the parser works on the steps that have arrived while
 * the next ones are read, so a big vocabulary is walked while the I/O is under way.
 */
async function readFromSource(source: ByteSource, owned: ByteSource[], opts: ReadOptions): Promise<GgufModel> {
  const size = source.size;
  const first = Math.min(size, Math.max(64, opts.initialChunk ?? 1 << 20));
  const allocate = opts.allocate ?? headerBuffer;
  const sb = new SteppedBuffer(source, allocate, allocate(first), 0, 0);
  try {
    // Only the first step: nothing past it is read before the parser asks (a small header's
    // file is read no further than this step).
    sb.readAhead(first, first);
    await sb.next();
    const parser = new Parser(sb.buf.subarray(0, sb.filled), { name: source.name, fileSize: size, sizeKnown: true }, {
      allocate,
      ...(opts.walkStrings !== undefined ? { walkStrings: opts.walkStrings } : {}),
    });
    for (;;) {
      try {
        const h = parser.header();
        await sb.drain();
        // Room never read stays zero: views of this buffer must not show stale memory.
        sb.buf.fill(0, sb.filled - sb.base);
        return buildModel(h, source, owned);
      } catch (e) {
        if (!(e instanceof NeedMoreBytes)) throw e;
        const { minEnd, expectedEnd } = e;
        // Reads go a little past the parser's estimate, never more than what was read so far:
        // a small header read from a small first step is read no further than it needs.
        const ahead = Math.min(READ_AHEAD, sb.filled);
        if (minEnd > sb.cap || (expectedEnd > sb.cap && sb.issued === sb.cap)) {
          // Size the next buffer to end near what the parser expects: the unread end is zeroed at
          // the end, and touching memory is what a short run pays for. It starts at the entry
          // being parsed, so only that entry is copied, and at least doubles that entry's bytes,
          // so a run of low estimates still costs linear time.
          const keep = parser.resumeAt();
          sb.grow(keep, Math.min(size, Math.max(minEnd, expectedEnd + ahead, keep + 2 * (sb.filled - keep))));
        }
        const target = Math.max(minEnd, expectedEnd + ahead);
        // As many steps as it takes to reach minEnd (at least one: minEnd is past what was parsed).
        do {
          sb.readAhead(target);
          await sb.next();
        } while (sb.filled < minEnd);
        sb.readAhead(target);
        parser.setBytes(sb.buf.subarray(0, sb.filled - sb.base), sb.base);
      }
    }
  } finally {
    // A failed parse may leave reads in flight: let them settle before the caller closes the source.
    await sb.settle();
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
