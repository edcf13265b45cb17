// Synchronous GGUF header parser over a byte prefix of a file. Every count and length is
// checked against the bytes the file could still hold before anything is allocated.
import {
  BigIntArray,
  BoolArray,
  NestedArray,
  NumberArray,
  ParsedStrings,
  StringArray,
  isNumberItemType,
  typedArrayView,
  type BigIntTypedArray,
  type NumberTypedArray,
  valueTypeName,
  valueTypeSize,
} from "./arrays";
import { GgufError, type GgufErrorCode } from "./errors";
import { ggmlTypeInfo, isKnownGgmlType } from "./ggml-types";
import { GGUF_DEFAULT_ALIGNMENT, GgufKeys } from "./keys";
import { GgufValueType, type GgufArray, type GgufKv, type GgufValue } from "./types";
import { decodeUtf8Strict, isValidUtf8, nativeSlicer } from "./utf8";

export const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Same limits as llama.cpp's gguf.cpp. */
const MAX_STRING_LENGTH = 1024 * 1024 * 1024;
const MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024;
/** Nested arrays deeper than this are rejected (llama.cpp allows none at all). */
const MAX_ARRAY_DEPTH = 32;
/**
 * Nested arrays in one header, all keys together. Each costs an object far larger than its
 * 12 encoded bytes, so a byte bound alone lets a 300 MB header of empty arrays take gigabytes.
 */
const MAX_NESTED_ARRAYS = 1 << 16;
/** GGML_MAX_DIMS */
const MAX_DIMS = 4;

const GGUF_MAGIC = 0x46554747; // "GGUF" read as little-endian u32
/** From this size on, a numeric array's aligned copy comes from the reader's allocator. */
const ALLOCATED_COPY = 64 * 1024;
/** Least distance between two of a string array's walk marks (StringScan.marks). */
const MARK_SPACING = 1 << 15;
/** Bytes one call of the string walk covers. */
const SCAN_WINDOW = 1 << 16;

/** Thrown (internally) when the parser needs bytes beyond the current buffer. */
export class NeedMoreBytes {
  /**
   * `minEnd`: the file must be read up to here for parsing to move on at all.
   * `expectedEnd`: where the item being read probably ends (a whole string array), for sizing buffers.
   */
  constructor(
    readonly minEnd: number,
    readonly expectedEnd = minEnd,
  ) {}
}

export interface ParsedTensorInfo {
  name: string;
  type: number;
  shape: number[];
  /** Offset relative to the data section, as stored in the file. */
  offset: number;
  byteSize: number;
  /** Where this info's offset field sits in the file (for error messages). */
  infoOffset: number;
}

export interface ParsedHeader {
  version: number;
  littleEndian: boolean;
  kvs: GgufKv[];
  /** Where each KV (by index in `kvs`) starts in the file: the offset of its key. */
  kvOffsets: number[];
  tensors: ParsedTensorInfo[];
  alignment: number;
  /** End of the tensor info section. */
  headerEnd: number;
  /** Absolute offset of the tensor data section. */
  dataOffset: number;
}

/**
 * The string walk's step over short items, compiled (ReadOptions.walkStrings): from the item `i`
 * whose little-endian u64 length prefix is at bytes[q], step over items while i < n, the length
 * is below 0x80 (its high word 0) and the item ends by `stop`; the position and the item it
 * stopped at go to out[0] and out[1]. walkShortItemsLE is the same loop.
 */
export type StringWalk = (bytes: Uint8Array, q: number, i: number, n: number, stop: number, out: Float64Array) => void;

/** What a reader lends the parser: cheaper memory, a compiled walk. */
export interface ParserHelpers {
  /**
   * Memory for the copies of numeric arrays that do not sit on their item size in the file
   * (the reader's header allocator; default: a fresh Uint8Array). A vocabulary's scores and
   * types are a megabyte each, and fresh 4 KiB pages cost a page fault apiece.
   */
  allocate?: (length: number) => Uint8Array;
  walkStrings?: StringWalk;
}

export interface ParseLimits {
  /** Display name for errors. */
  name: string;
  /** Total size of the file; counts and lengths are checked against it. */
  fileSize: number;
  /** Whether fileSize is the real file size (tensor ranges are then checked against it). */
  sizeKnown: boolean;
}

export function alignUp(n: number, alignment: number): number {
  const r = n % alignment;
  return r === 0 ? n : n + (alignment - r);
}

function swapBytes(bytes: Uint8Array, size: number): void {
  if (size === 1) return;
  for (let i = 0; i + size <= bytes.length; i += size) {
    for (let a = i, b = i + size - 1; a < b; a++, b--) {
      const t = bytes[a]!;
      bytes[a] = bytes[b]!;
      bytes[b] = t;
    }
  }
}

interface StringScan {
  n: number;
  regionStart: number;
  /** Next item to scan and where its length prefix starts. */
  i: number;
  p: number;
  /** Start of the current not-yet-validated UTF-8 run, and its first item. */
  segStart: number;
  segFirst: number;
  /** Where item segFirst's length prefix is (segStart is there or just after it). */
  segFirstPrefix: number;
  /**
   * Places the walk passed, as pairs (item index, offset of its prefix from regionStart), at
   * least MARK_SPACING bytes apart: head(k) of the parsed array walks from the nearest one
   * instead of from item 0 (a vocabulary cut to the embedding's rows is walked once, not twice).
   */
  marks: number[];
  /**
   * Invalid UTF-8 found in the part of the current run read so far, thrown when the run ends.
   * A parse of the whole buffer validates a run only at its end, so a bad length later in the
   * same run is reported first; holding the error keeps every way of reading the file in step.
   */
  invalid?: GgufError;
}

/**
 * Resumable: when the buffer runs out it throws NeedMoreBytes and keeps every finished
 * metadata entry and tensor info, so after setBytes(more bytes) parsing continues from
 * the item that was cut instead of from byte 0.
 *
 * Positions inside the parser (pos, scan state) are relative to `bytes`, which holds the
 * file from offset `base` on; offsets in errors and results are absolute.
 */
export class Parser {
  private bytes!: Uint8Array;
  /** Node's native slicer over `bytes` (undefined off Node), for keys, names and string values. */
  private slice: ((start: number, end: number) => string) | undefined;
  private dv!: DataView;
  private end = 0;
  private base = 0;
  pos = 0;
  le = true;

  // Progress kept across NeedMoreBytes.
  private phase: "preamble" | "kvs" | "tensors" = "preamble";
  private version = 0;
  private nKv = 0;
  private nTensors = 0;
  private readonly kvs: GgufKv[] = [];
  private readonly kvOffsets: number[] = [];
  private readonly seenKeys = new Set<string>();
  private readonly tensors: ParsedTensorInfo[] = [];
  private readonly seenNames = new Set<string>();
  private alignment = GGUF_DEFAULT_ALIGNMENT;
  private pendingStrings: StringScan | undefined;
  /** Nested arrays in the KVs completed so far, and in the one being read (restarted on NeedMoreBytes). */
  private nestedArrays = 0;
  private nestedInKv = 0;

  constructor(
    bytes: Uint8Array,
    private readonly limits: ParseLimits,
    private readonly helpers: ParserHelpers = {},
  ) {
    this.setBytes(bytes);
  }

  /**
   * Continue with more bytes of the same file: `bytes` holds the file from offset `base`
   * (at most resumeAt(), so the cut item is inside it) up to further than before.
   */
  setBytes(bytes: Uint8Array, base = 0): void {
    const shift = this.base - base;
    if (shift !== 0) {
      this.pos += shift;
      const st = this.pendingStrings;
      if (st !== undefined) {
        st.regionStart += shift;
        st.p += shift;
        st.segStart += shift;
        st.segFirstPrefix += shift;
      }
    }
    this.base = base;
    this.bytes = bytes;
    this.slice = nativeSlicer(bytes);
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.end = bytes.length;
  }

  /** Absolute file offset the parser resumes from after NeedMoreBytes (bytes before it are done with). */
  resumeAt(): number {
    return this.phase === "preamble" ? 0 : this.base + this.pos;
  }

  /** `offset` is relative to the current buffer. */
  fail(code: GgufErrorCode, message: string, offset: number, expected?: string): never {
    return this.failAt(code, message, this.base + offset, expected);
  }

  /** `offset` is an absolute file offset. */
  failAt(code: GgufErrorCode, message: string, offset: number, expected?: string): never {
    throw new GgufError(code, message, {
      source: this.limits.name,
      offset,
      ...(expected === undefined ? {} : { expected }),
    });
  }

  /** Bytes the file can still hold from `at`. */
  remaining(at = this.pos): number {
    return this.limits.fileSize - this.base - at;
  }

  need(n: number, what: string, at = this.pos): void {
    if (at + n <= this.end) return;
    const fileSize = this.limits.fileSize;
    const abs = this.base + at;
    if (abs + n > fileSize || this.base + this.end >= fileSize) {
      this.fail("TRUNCATED", `file ends inside ${what}`, at, `${n} more bytes, file has ${Math.max(0, fileSize - abs)}`);
    }
    throw new NeedMoreBytes(abs + n);
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.pos, this.le);
    this.pos += 4;
    return v;
  }

  i32(what: string): number {
    this.need(4, what);
    const v = this.dv.getInt32(this.pos, this.le);
    this.pos += 4;
    return v;
  }

  /** A u64 count or size as a number; `code` is raised if it exceeds 2^53-1. */
  u64(what: string, code: GgufErrorCode): number {
    this.need(8, what);
    const p = this.pos;
    const lo = this.dv.getUint32(this.le ? p : p + 4, this.le);
    const hi = this.dv.getUint32(this.le ? p + 4 : p, this.le);
    if (hi > 0x1fffff) this.fail(code, `${what} is too large (${this.dv.getBigUint64(p, this.le)})`, p, "at most 2^53-1");
    this.pos += 8;
    return hi * 0x100000000 + lo;
  }

  string(what: string): string {
    const at = this.pos;
    const len = this.u64(`${what} length`, "STRING_TOO_LONG");
    if (len > MAX_STRING_LENGTH || len > this.remaining()) {
      this.fail("STRING_TOO_LONG", `${what} length ${len} runs past the end of the file`, at, `at most ${Math.min(MAX_STRING_LENGTH, this.remaining())} bytes`);
    }
    this.need(len, what);
    const s = decodeUtf8Strict(this.bytes, this.pos, this.pos + len, this.slice);
    if (s === undefined) this.fail("INVALID_UTF8", `${what} is not valid UTF-8`, this.pos);
    this.pos += len;
    return s;
  }

  scalar(type: GgufValueType, at: number): GgufValue {
    const p = this.pos;
    switch (type) {
      case GgufValueType.UINT8:
        this.need(1, "u8 value");
        this.pos += 1;
        return this.dv.getUint8(p);
      case GgufValueType.INT8:
        this.need(1, "i8 value");
        this.pos += 1;
        return this.dv.getInt8(p);
      case GgufValueType.UINT16:
        this.need(2, "u16 value");
        this.pos += 2;
        return this.dv.getUint16(p, this.le);
      case GgufValueType.INT16:
        this.need(2, "i16 value");
        this.pos += 2;
        return this.dv.getInt16(p, this.le);
      case GgufValueType.UINT32:
        this.need(4, "u32 value");
        this.pos += 4;
        return this.dv.getUint32(p, this.le);
      case GgufValueType.INT32:
        this.need(4, "i32 value");
        this.pos += 4;
        return this.dv.getInt32(p, this.le);
      case GgufValueType.FLOAT32:
        this.need(4, "f32 value");
        this.pos += 4;
        return this.dv.getFloat32(p, this.le);
      case GgufValueType.FLOAT64:
        this.need(8, "f64 value");
        this.pos += 8;
        return this.dv.getFloat64(p, this.le);
      case GgufValueType.UINT64:
        this.need(8, "u64 value");
        this.pos += 8;
        return this.dv.getBigUint64(p, this.le);
      case GgufValueType.INT64:
        this.need(8, "i64 value");
        this.pos += 8;
        return this.dv.getBigInt64(p, this.le);
      case GgufValueType.BOOL:
        this.need(1, "bool value");
        this.pos += 1;
        return this.dv.getUint8(p) !== 0;
      case GgufValueType.STRING:
        return this.string("string value");
      default:
        return this.fail("BAD_VALUE_TYPE", `unknown value type ${type as number}`, at, "a GGUF value type 0..12");
    }
  }

  /** Array body after the ARRAY tag: item type, count, items. */
  array(depth: number): GgufArray {
    const typeAt = this.pos;
    const itemType = this.i32("array item type");
    const countAt = this.pos;
    const n = this.u64("array length", "COUNT_TOO_LARGE");
    if (itemType < 0 || itemType > 12) {
      this.fail("BAD_VALUE_TYPE", `unknown array item type ${itemType}`, typeAt, "a GGUF value type 0..12");
    }
    const size = valueTypeSize(itemType);
    // Smallest possible encoding of one item: fixed size, a u64 length, or type+count.
    const minItem = size > 0 ? size : itemType === GgufValueType.STRING ? 8 : 12;
    if (n > MAX_ARRAY_ELEMENTS || n * minItem > this.remaining()) {
      this.fail(
        "COUNT_TOO_LARGE",
        `array of ${n} ${valueTypeName(itemType)} items cannot fit in the ${this.remaining()} bytes left`,
        countAt,
        `at most ${Math.floor(Math.min(MAX_ARRAY_ELEMENTS, this.remaining() / minItem))} items`,
      );
    }
    if (itemType === GgufValueType.STRING) return this.stringArray(n);
    if (itemType === GgufValueType.ARRAY) {
      if (depth >= MAX_ARRAY_DEPTH) this.fail("BAD_VALUE_TYPE", `arrays nested deeper than ${MAX_ARRAY_DEPTH}`, typeAt);
      if (this.nestedArrays + this.nestedInKv + n > MAX_NESTED_ARRAYS) {
        this.fail("COUNT_TOO_LARGE", `${n} nested arrays exceed the header's budget`, countAt, `at most ${MAX_NESTED_ARRAYS} nested arrays in all`);
      }
      this.nestedInKv += n;
      const items: GgufArray[] = [];
      for (let i = 0; i < n; i++) items.push(this.array(depth + 1));
      return new NestedArray(items);
    }
    const nbytes = n * size;
    this.need(nbytes, `${valueTypeName(itemType)} array`);
    const p = this.pos;
    this.pos += nbytes;
    if (itemType === GgufValueType.BOOL) return new BoolArray(this.bytes.subarray(p, p + nbytes));
    const abs = this.bytes.byteOffset + p;
    let values;
    if (this.le === HOST_LITTLE_ENDIAN && abs % size === 0) {
      values = typedArrayView(itemType, this.bytes.buffer, abs, n);
    } else {
      const copy = this.copyOf(p, nbytes, size);
      if (this.le !== HOST_LITTLE_ENDIAN) swapBytes(copy, size);
      values = typedArrayView(itemType, copy.buffer, copy.byteOffset, n);
    }
    if (isNumberItemType(itemType)) return new NumberArray(itemType, values as NumberTypedArray);
    return new BigIntArray(itemType as GgufValueType.UINT64 | GgufValueType.INT64, values as BigIntTypedArray);
  }

  /** A copy of bytes [p, p + n) that starts on a multiple of `align` (a typed array views it). */
  private copyOf(p: number, n: number, align: number): Uint8Array {
    const out = n >= ALLOCATED_COPY ? this.helpers.allocate?.(n) : undefined;
    if (out === undefined || out.byteOffset % align !== 0 || out.length !== n) return this.bytes.slice(p, p + n);
    out.set(this.bytes.subarray(p, p + n));
    return out;
  }

  /**
   * String arrays (vocabularies, merges) are the bulk of a header. Walk the length prefixes
   * (checking each, recording nothing: items are located again when read) and validate UTF-8
   * with one native call per run of strings.
   * If the buffer ends mid-array the progress is kept, and the next attempt continues there.
   */
  stringArray(n: number): StringArray {
    let st = this.pendingStrings;
    this.pendingStrings = undefined;
    if (st === undefined || st.regionStart !== this.pos || st.n !== n) {
      const p = this.pos;
      st = { n, regionStart: p, i: 0, p, segStart: p, segFirst: 0, segFirstPrefix: p, marks: [] };
    }
    this.scanStrings(st);
    if (st.i < n) {
      // Validate what is complete now (the next attempt continues after it): with stepped
      // reads this check also runs while the following bytes are being read. Its error waits
      // for the run's end while more of the file can still come (see StringScan.invalid).
      const more = this.base + this.end < this.limits.fileSize;
      try {
        this.checkUtf8Run(st, st.p, st.i);
      } catch (e) {
        if (!(more && e instanceof GgufError)) throw e;
        st.invalid ??= e;
      }
      st.segStart = st.segFirstPrefix = st.p;
      st.segFirst = st.i;
      this.pendingStrings = st;
      this.moreForStrings(st);
    }
    this.checkUtf8Run(st, st.p, n);
    this.pos = st.p;
    return new StringArray(new ParsedStrings(this.bytes.subarray(st.regionStart, st.p), n, this.le, st.marks));
  }

  /**
   * Advance over every string fully inside the buffer. Never throws for "need more".
   * Short items go through walkShortItems in windows; this handles what stops it.
   */
  private scanStrings(st: StringScan): void {
    const end = this.end;
    const marks = st.marks;
    while (st.i < st.n && st.p + 8 <= end) {
      const from = st.p;
      const at = from - st.regionStart;
      if (marks.length === 0 || at - marks[marks.length - 1]! >= MARK_SPACING) marks.push(st.i, at);
      // Relative positions: parser positions may be held as doubles, and small integers keep
      // the walk's arithmetic in integer registers (2.5x faster).
      const span = Math.min(end - from, SCAN_WINDOW);
      let q: number;
      const walk = this.helpers.walkStrings;
      if (walk !== undefined && this.le) {
        walk(this.bytes, from, st.i, st.n, from + span, walkOut);
        q = walkOut[0]! - from;
        walkedTo = walkOut[1]!;
      } else {
        const dv = new DataView(this.bytes.buffer, this.bytes.byteOffset + from, span);
        q = this.le ? walkShortItemsLE(dv, 0, st.i, st.n, span) : walkShortItemsBE(dv, 0, st.i, st.n, span);
      }
      st.p = from + q;
      st.i = walkedTo;
      if (st.i < st.n && q + 8 > span && span < end - from) continue; // the window ended, not the buffer
      if (st.i >= st.n || st.p + 8 > end) break;
      if (!this.longItem(st)) break;
    }
  }

  /**
   * The item at st.p stopped the walk: long (its prefix has a byte >= 0x80), bad, or not
   * wholly in the buffer. Checks it and steps over it if it is there; false if it is cut.
   */
  private longItem(st: StringScan): boolean {
    const p = st.p;
    const i = st.i;
    const lo = this.dv.getUint32(this.le ? p : p + 4, this.le);
    const hi = this.dv.getUint32(this.le ? p + 4 : p, this.le);
    const room = this.limits.fileSize - this.base - (p + 8);
    if (hi !== 0 || lo > MAX_STRING_LENGTH || lo > room) this.badStringLength(p, i);
    if (p + 8 + lo > this.end) return false;
    // A prefix with a byte >= 0x80 cannot sit inside a validated UTF-8 run.
    if (lo >= 0x80) this.splitUtf8Run(st, p, i);
    st.p = p + 8 + lo;
    st.i = i + 1;
    return true;
  }

  private badStringLength(p: number, i: number): never {
    const room = this.limits.fileSize - this.base - (p + 8);
    return this.fail("STRING_TOO_LONG", `string ${i} of array has length ${this.dv.getBigUint64(p, this.le)} past the end of the file`, p, `at most ${Math.min(MAX_STRING_LENGTH, room)} bytes`);
  }

  /** Validate the run before item i's prefix (at p) and start the next run at item i's bytes. */
  private splitUtf8Run(st: StringScan, p: number, i: number): void {
    this.checkUtf8Run(st, p, i);
    st.segStart = p + 8;
    st.segFirst = i;
    st.segFirstPrefix = p;
  }

  /** Out of buffer inside a string array: ask for enough to finish it, judging by the items so far. */
  private moreForStrings(st: StringScan): never {
    const p = st.p;
    const abs = this.base + p;
    const fileSize = this.limits.fileSize;
    let need = 8;
    if (p + 8 <= this.end) need = 8 + this.dv.getUint32(this.le ? p : p + 4, this.le);
    if (abs + need > fileSize) {
      this.fail("TRUNCATED", "file ends inside string array", p, `${need} more bytes, file has ${Math.max(0, fileSize - abs)}`);
    }
    const avg = Math.max(8, (p + need - st.regionStart) / (st.i + 1));
    throw new NeedMoreBytes(abs + need, Math.min(fileSize, Math.max(abs + need, Math.ceil(abs + (st.n - st.i) * avg * 1.1))));
  }

  /**
   * Validate the current run, bytes[st.segStart, to): items segFirst..last-1 separated by
   * ASCII-only length prefixes. Because every string is bounded by ASCII bytes or the run's
   * ends, the run is valid iff each string is; when it is not, the walk finds which one.
   */
  private checkUtf8Run(st: StringScan, to: number, last: number): void {
    if (st.invalid !== undefined) throw st.invalid;
    const from = st.segStart;
    if (isValidUtf8(this.bytes, from, to)) return;
    let p = st.segFirstPrefix;
    for (let i = st.segFirst; i < last; i++) {
      const len = this.dv.getUint32(this.le ? p : p + 4, this.le);
      const s = p + 8;
      if (!isValidUtf8(this.bytes, s, s + len)) this.fail("INVALID_UTF8", `string ${i} of array is not valid UTF-8`, s);
      p = s + len;
    }
    this.fail("INVALID_UTF8", "string array is not valid UTF-8", from);
  }

  header(): ParsedHeader {
    if (this.phase === "preamble") {
      this.pos = 0;
      this.preamble();
      this.phase = "kvs";
    }
    if (this.phase === "kvs") {
      while (this.kvs.length < this.nKv) {
        const start = this.pos;
        try {
          this.kv();
        } catch (e) {
          if (e instanceof NeedMoreBytes) this.pos = start;
          throw e;
        }
      }
      this.checkAlignment();
      this.phase = "tensors";
    }
    while (this.tensors.length < this.nTensors) {
      const start = this.pos;
      try {
        this.tensorInfo();
      } catch (e) {
        if (e instanceof NeedMoreBytes) this.pos = start;
        throw e;
      }
    }
    const headerEnd = this.base + this.pos;
    const dataOffset = this.nTensors > 0 ? alignUp(headerEnd, this.alignment) : headerEnd;
    const h: ParsedHeader = {
      version: this.version,
      littleEndian: this.le,
      kvs: this.kvs,
      kvOffsets: this.kvOffsets,
      tensors: this.tensors,
      alignment: this.alignment,
      headerEnd,
      dataOffset,
    };
    checkTensorOffsets(h, this.limits.name, this.limits.sizeKnown ? this.limits.fileSize : undefined);
    return h;
  }

  private preamble(): void {
    this.need(4, "magic");
    const magic = this.dv.getUint32(0, true);
    if (magic !== GGUF_MAGIC) {
      const shown = Array.from(this.bytes.subarray(0, 4), (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : "?")).join("");
      this.fail("BAD_MAGIC", `not a GGUF file (magic "${shown}")`, 0, '"GGUF"');
    }
    this.pos = 4;
    this.need(4, "version");
    let version = this.dv.getUint32(4, true);
    // A file from the other byte order shows its small version number in the high bytes.
    if ((version & 0xffff) === 0 && version !== 0) {
      this.le = false;
      version = this.dv.getUint32(4, false);
    }
    if (version === 1) this.fail("UNSUPPORTED_VERSION", "GGUF version 1 is not supported", 4, "version 2 or 3");
    if (version !== 2 && version !== 3) this.fail("UNSUPPORTED_VERSION", `unsupported GGUF version ${version}`, 4, "version 2 or 3");
    this.version = version;
    this.pos = 8;
    const nTensorsAt = this.pos;
    const nTensors = this.u64("tensor count", "COUNT_TOO_LARGE");
    const nKvAt = this.pos;
    const nKv = this.u64("metadata count", "COUNT_TOO_LARGE");
    // Minimal encodings: a KV is key length + type + 1 byte; a tensor info is name length + n_dims + type + offset.
    if (nKv * 13 > this.remaining()) {
      this.fail("COUNT_TOO_LARGE", `${nKv} metadata entries cannot fit in the ${this.remaining()} bytes left`, nKvAt, `at most ${Math.floor(this.remaining() / 13)}`);
    }
    if (nTensors * 24 > this.remaining()) {
      this.fail("COUNT_TOO_LARGE", `${nTensors} tensor infos cannot fit in the ${this.remaining()} bytes left`, nTensorsAt, `at most ${Math.floor(this.remaining() / 24)}`);
    }
    this.nKv = nKv;
    this.nTensors = nTensors;
  }

  private kv(): void {
    const keyAt = this.pos;
    const key = this.string("key");
    if (key.length === 0) this.fail("EMPTY_KEY", `metadata key ${this.kvs.length} is empty`, keyAt, "a non-empty key");
    if (this.seenKeys.has(key)) this.fail("DUPLICATE_KEY", `duplicate metadata key "${key}"`, keyAt, "unique keys");
    const typeAt = this.pos;
    const type = this.i32("value type");
    let value: GgufValue;
    this.nestedInKv = 0;
    if (type === GgufValueType.ARRAY) value = this.array(1);
    else if (type >= 0 && type <= 12) value = this.scalar(type, typeAt);
    else this.fail("BAD_VALUE_TYPE", `key "${key}" has unknown value type ${type}`, typeAt, "a GGUF value type 0..12");
    this.seenKeys.add(key);
    this.kvs.push({ key, type, value });
    this.kvOffsets.push(this.base + keyAt); // absolute: the buffer may start past the file's start
    this.nestedArrays += this.nestedInKv;
  }

  private checkAlignment(): void {
    const i = this.kvs.findIndex((kv) => kv.key === GgufKeys.ALIGNMENT);
    if (i < 0) return;
    const alignKv = this.kvs[i]!;
    const at = this.kvOffsets[i]!;
    if (alignKv.type !== GgufValueType.UINT32) {
      this.failAt("BAD_ALIGNMENT", `general.alignment has type ${valueTypeName(alignKv.type)}`, at, "UINT32");
    }
    const alignment = alignKv.value as number;
    if (alignment === 0 || (alignment & (alignment - 1)) !== 0) {
      this.failAt("BAD_ALIGNMENT", `general.alignment is ${alignment}`, at, "a power of two");
    }
    this.alignment = alignment;
  }

  private tensorInfo(): void {
    const nameAt = this.pos;
    const name = this.string("tensor name");
    if (this.seenNames.has(name)) this.fail("DUPLICATE_TENSOR", `duplicate tensor name "${name}"`, nameAt, "unique tensor names");
    const dimsAt = this.pos;
    const nDims = this.u32("dimension count");
    if (nDims > MAX_DIMS) this.fail("BAD_SHAPE", `tensor "${name}" has ${nDims} dimensions`, dimsAt, `at most ${MAX_DIMS}`);
    // Sized up front: an array grown by push keeps room for 17 elements, in every tensor info.
    const shape = new Array<number>(nDims);
    let elements = 1;
    for (let d = 0; d < nDims; d++) {
      this.need(8, "dimension");
      const p = this.pos;
      const hi = this.dv.getUint32(this.le ? p + 4 : p, this.le);
      const lo = this.dv.getUint32(this.le ? p : p + 4, this.le);
      if (hi >= 0x80000000) this.fail("BAD_SHAPE", `tensor "${name}" dimension ${d} is negative`, p, "a non-negative size");
      if (hi > 0x1fffff) this.fail("SHAPE_OVERFLOW", `tensor "${name}" dimension ${d} is too large`, p, "at most 2^53-1");
      const dim = hi * 0x100000000 + lo;
      shape[d] = dim;
      elements *= dim;
      if (elements > Number.MAX_SAFE_INTEGER) {
        this.fail("SHAPE_OVERFLOW", `tensor "${name}" has more than 2^53-1 elements`, p, "a representable element count");
      }
      this.pos += 8;
    }
    const typeAt = this.pos;
    const type = this.i32("ggml type");
    if (!isKnownGgmlType(type)) this.fail("BAD_GGML_TYPE", `tensor "${name}" has unknown ggml type ${type}`, typeAt, "a ggml type known to llama.cpp");
    const info = ggmlTypeInfo(type);
    const row = shape.length > 0 ? shape[0]! : 1;
    if (row % info.blockSize !== 0) {
      this.fail("BAD_SHAPE", `tensor "${name}" row length ${row} is not a multiple of the ${info.name} block size`, dimsAt, `a multiple of ${info.blockSize}`);
    }
    const byteSize = (elements / info.blockSize) * info.typeSize;
    if (byteSize > Number.MAX_SAFE_INTEGER) this.fail("SHAPE_OVERFLOW", `tensor "${name}" is larger than 2^53-1 bytes`, dimsAt);
    const infoOffset = this.base + this.pos;
    const offset = this.u64("tensor offset", "TENSOR_OFFSET");
    this.seenNames.add(name);
    this.tensors.push({ name, type, shape, offset, byteSize, infoOffset });
  }
}

/** Item index the last walkShortItems call stopped at (it returns the position). */
let walkedTo = 0;
/** Where a StringWalk leaves its position and item. */
const walkOut = new Float64Array(2);

/**
 * The hot loop of a header parse: step over string items [i, n) from position q while each
 * is short (length < 0x80, so its prefix is ASCII and cannot break a UTF-8 run) and wholly
 * inside [0, stop). Stops before any other item for the caller to look at. It is this small,
 * and runs over a window per call, so that the engine optimizes it within a few calls: a
 * cold process walks most of a vocabulary before a large function would be compiled.
 */
function walkShortItemsLE(dv: DataView, q: number, i: number, n: number, stop: number): number {
  while (i < n && q + 8 <= stop) {
    const len = dv.getUint32(q, true);
    const next = q + 8 + len;
    if (len >= 0x80 || next > stop || dv.getUint32(q + 4, true) !== 0) break;
    q = next;
    i++;
  }
  walkedTo = i;
  return q;
}

/** walkShortItemsLE for big-endian files. */
function walkShortItemsBE(dv: DataView, q: number, i: number, n: number, stop: number): number {
  while (i < n && q + 8 <= stop) {
    const len = dv.getUint32(q + 4, false);
    const next = q + 8 + len;
    if (len >= 0x80 || next > stop || dv.getUint32(q, false) !== 0) break;
    q = next;
    i++;
  }
  walkedTo = i;
  return q;
}

/**
 * Parse a GGUF header from `bytes` (a prefix of the file). Throws NeedMoreBytes when the
 * prefix is too short but the file is larger; GgufError for anything malformed.
 */
export function parseHeader(bytes: Uint8Array, limits: ParseLimits): ParsedHeader {
  return new Parser(bytes, limits).header();
}

/**
 * Tensor offsets must be aligned, in info order and non-overlapping; with a known file
 * size, every tensor's bytes must also lie inside the file.
 */
export function checkTensorOffsets(h: ParsedHeader, name: string, fileSize: number | undefined): void {
  const fail = (message: string, offset: number, expected: string): never => {
    throw new GgufError("TENSOR_OFFSET", message, { source: name, offset, expected });
  };
  const { alignment, dataOffset, tensors } = h;
  if (fileSize !== undefined && tensors.length > 0 && dataOffset > fileSize) {
    throw new GgufError("TRUNCATED", "file ends before the tensor data section", { source: name, offset: fileSize, expected: `data at offset ${dataOffset}` });
  }
  let next = 0;
  for (const t of tensors) {
    if (t.offset % alignment !== 0) fail(`tensor "${t.name}" offset ${t.offset} is not aligned`, t.infoOffset, `a multiple of ${alignment}`);
    if (t.offset < next) {
      fail(`tensor "${t.name}" at offset ${t.offset} overlaps the previous tensor or is out of order`, t.infoOffset, `an offset >= ${next}`);
    }
    if (fileSize !== undefined && dataOffset + t.offset + t.byteSize > fileSize) {
      fail(`tensor "${t.name}" data (${t.byteSize} bytes at data offset ${t.offset}) runs past the end of the file`, t.infoOffset, `data ending by byte ${fileSize}`);
    }
    next = alignUp(t.offset + t.byteSize, alignment);
  }
}
