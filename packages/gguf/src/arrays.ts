import { GgufError } from "./errors";
import { GgufValueType, type GgufArray, type GgufValue } from "./types";
import { decodeItems, encodeUtf8, sliceDecoder } from "./utf8";

export type NumberTypedArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array;
export type BigIntTypedArray = BigUint64Array | BigInt64Array;

/** Item types whose values are plain JS numbers. */
export type NumberItemType =
  | GgufValueType.UINT8
  | GgufValueType.INT8
  | GgufValueType.UINT16
  | GgufValueType.INT16
  | GgufValueType.UINT32
  | GgufValueType.INT32
  | GgufValueType.FLOAT32
  | GgufValueType.FLOAT64;

/** Byte size of a fixed-size value type, or 0 for STRING / ARRAY / unknown. */
export function valueTypeSize(type: number): number {
  switch (type) {
    case GgufValueType.UINT8:
    case GgufValueType.INT8:
    case GgufValueType.BOOL:
      return 1;
    case GgufValueType.UINT16:
    case GgufValueType.INT16:
      return 2;
    case GgufValueType.UINT32:
    case GgufValueType.INT32:
    case GgufValueType.FLOAT32:
      return 4;
    case GgufValueType.UINT64:
    case GgufValueType.INT64:
    case GgufValueType.FLOAT64:
      return 8;
    default:
      return 0;
  }
}

function isValueType(type: number): type is GgufValueType {
  return Number.isInteger(type) && type >= 0 && type <= 12;
}

export function isNumberItemType(type: number): type is NumberItemType {
  return (type >= 0 && type <= 6) || type === GgufValueType.FLOAT64;
}

export function valueTypeName(type: number): string {
  return GgufValueType[type] ?? `type${type}`;
}

/** The typed array constructor used to hold a numeric item type. */
function typedArrayFor(type: NumberItemType): new (n: number) => NumberTypedArray;
function typedArrayFor(type: GgufValueType.UINT64 | GgufValueType.INT64): new (n: number) => BigIntTypedArray;
function typedArrayFor(type: number): new (n: number) => NumberTypedArray | BigIntTypedArray;
function typedArrayFor(type: number): new (n: number) => NumberTypedArray | BigIntTypedArray {
  switch (type) {
    case GgufValueType.UINT8:
      return Uint8Array;
    case GgufValueType.INT8:
      return Int8Array;
    case GgufValueType.UINT16:
      return Uint16Array;
    case GgufValueType.INT16:
      return Int16Array;
    case GgufValueType.UINT32:
      return Uint32Array;
    case GgufValueType.INT32:
      return Int32Array;
    case GgufValueType.FLOAT32:
      return Float32Array;
    case GgufValueType.FLOAT64:
      return Float64Array;
    case GgufValueType.UINT64:
      return BigUint64Array;
    case GgufValueType.INT64:
      return BigInt64Array;
    default:
      throw new GgufError("BAD_VALUE_TYPE", `${valueTypeName(type)} has no typed array`);
  }
}

/**
 * A packed array of `n` undefined slots. (`new Array(n)` for large n gives V8 a slow
 * dictionary-mode array, which made decoding a 500k-item vocabulary 20x slower.)
 */
/** Items at() caches in a map before it switches to a packed cache of every slot. */
const SPARSE_CACHE_LIMIT = 1024;

function emptyCache(n: number): (string | undefined)[] {
  const a: (string | undefined)[] = [];
  for (let i = 0; i < n; i++) a.push(undefined);
  return a;
}

function outOfRange(i: number, n: number): never {
  throw new RangeError(`index ${i} out of range for array of length ${n}`);
}

/** 8/16/32-bit integers and floats, backed by a typed array. */
export class NumberArray implements GgufArray {
  readonly kind = "array" as const;
  constructor(
    readonly itemType: NumberItemType,
    /** Values in host order. May be a view into the parsed header: treat as read-only. */
    readonly values: NumberTypedArray,
  ) {}
  get length(): number {
    return this.values.length;
  }
  at(i: number): number {
    if (i < 0 || i >= this.values.length) outOfRange(i, this.values.length);
    return this.values[i]!;
  }
  toArray(): number[] {
    return Array.from(this.values);
  }
  /** The first `n` items, sharing this array's memory (no copy). */
  head(n: number): NumberArray {
    return new NumberArray(this.itemType, this.values.subarray(0, Math.max(0, Math.min(n, this.values.length))));
  }
}

/** UINT64 / INT64 items as bigint. */
export class BigIntArray implements GgufArray {
  readonly kind = "array" as const;
  constructor(
    readonly itemType: GgufValueType.UINT64 | GgufValueType.INT64,
    readonly values: BigIntTypedArray,
  ) {}
  get length(): number {
    return this.values.length;
  }
  at(i: number): bigint {
    if (i < 0 || i >= this.values.length) outOfRange(i, this.values.length);
    return this.values[i]!;
  }
  toArray(): bigint[] {
    return Array.from(this.values);
  }
}

/** BOOL items, kept as the raw bytes so that a rewrite reproduces them exactly. */
export class BoolArray implements GgufArray {
  readonly kind = "array" as const;
  readonly itemType = GgufValueType.BOOL;
  constructor(readonly bytes: Uint8Array) {}
  get length(): number {
    return this.bytes.length;
  }
  at(i: number): boolean {
    if (i < 0 || i >= this.bytes.length) outOfRange(i, this.bytes.length);
    return this.bytes[i] !== 0;
  }
  toArray(): boolean[] {
    const out: boolean[] = [];
    for (let i = 0; i < this.bytes.length; i++) out.push(this.bytes[i] !== 0);
    return out;
  }
}

/**
 * Raw encoding of a string array as found in a file: `region` holds, for every item,
 * a u64 length then the bytes; `starts`/`lengths` locate each item's bytes in `region`.
 */
export interface RawStrings {
  readonly region: Uint8Array;
  readonly starts: Uint32Array;
  readonly lengths: Uint32Array;
  /** Byte order of the length prefixes inside `region`. */
  readonly littleEndian: boolean;
}

/**
 * A string array's region as the parser leaves it: checked (every length fits, the bytes
 * are UTF-8) but not indexed. Walking 762k length prefixes once is the whole cost of a lazy
 * parse, so item offsets are found again only when an item is read, and only up to it.
 */
export class ParsedStrings implements RawStrings {
  private starts_: Uint32Array | undefined;
  private lengths_: Uint32Array | undefined;
  /** Items [0, indexed) are located; the next prefix starts at region offset `next`. */
  private indexed = 0;
  private next = 0;

  constructor(
    readonly region: Uint8Array,
    readonly count: number,
    readonly littleEndian: boolean,
    /** Pairs (item index, region offset of its prefix) the parser's walk passed, in order. */
    private readonly marks: readonly number[] = [],
  ) {}

  get starts(): Uint32Array {
    this.indexUpTo(this.count);
    return this.starts_!;
  }

  get lengths(): Uint32Array {
    this.indexUpTo(this.count);
    return this.lengths_!;
  }

  /** Byte offset of item i's bytes in `region`. */
  startOf(i: number): number {
    this.indexUpTo(i + 1);
    return this.starts_![i]!;
  }

  lengthOf(i: number): number {
    this.indexUpTo(i + 1);
    return this.lengths_![i]!;
  }

  /**
   * Where item k's prefix starts in `region` (its length for k = count): the bytes of the
   * first k items. Walks from the nearest place already known, recording nothing.
   */
  endOf(k: number): number {
    if (k >= this.count) return this.region.length;
    if (k <= this.indexed) return k === 0 ? 0 : this.starts_![k - 1]! + this.lengths_![k - 1]!;
    let i = this.indexed;
    let p = this.next;
    const marks = this.marks;
    for (let m = 0; m < marks.length && marks[m]! <= k; m += 2) {
      if (marks[m]! > i) {
        i = marks[m]!;
        p = marks[m + 1]!;
      }
    }
    const r = this.region;
    const dv = new DataView(r.buffer, r.byteOffset, r.byteLength);
    const loAt = this.littleEndian ? 0 : 4;
    for (; i < k; i++) p += 8 + dv.getUint32(p + loAt, this.littleEndian);
    return p;
  }

  /** The marks of the first k items (for the ParsedStrings of a head). */
  marksBelow(k: number): number[] {
    const out: number[] = [];
    for (let m = 0; m < this.marks.length && this.marks[m]! <= k; m += 2) out.push(this.marks[m]!, this.marks[m + 1]!);
    return out;
  }

  /** Locate items up to (not including) k. The parser has checked every prefix already. */
  indexUpTo(k: number): void {
    const starts = (this.starts_ ??= new Uint32Array(this.count));
    const lengths = (this.lengths_ ??= new Uint32Array(this.count));
    if (k <= this.indexed) return;
    const r = this.region;
    const dv = new DataView(r.buffer, r.byteOffset, r.byteLength);
    const loAt = this.littleEndian ? 0 : 4;
    let p = this.next;
    for (let i = this.indexed; i < k; i++) {
      const n = dv.getUint32(p + loAt, this.littleEndian);
      starts[i] = p + 8;
      lengths[i] = n;
      p += 8 + n;
    }
    this.indexed = k;
    this.next = p;
  }
}

const itemCount = (raw: RawStrings): number => (raw instanceof ParsedStrings ? raw.count : raw.starts.length);
const itemStart = (raw: RawStrings, i: number): number => (raw instanceof ParsedStrings ? raw.startOf(i) : raw.starts[i]!);
const itemLength = (raw: RawStrings, i: number): number => (raw instanceof ParsedStrings ? raw.lengthOf(i) : raw.lengths[i]!);

/**
 * STRING items. Parsed arrays stay as raw bytes and decode an item on first access,
 * so a 262k-token vocabulary costs nothing until used and rewrites as one memcpy.
 */
export class StringArray implements GgufArray {
  readonly kind = "array" as const;
  readonly itemType = GgufValueType.STRING;
  readonly raw: RawStrings | undefined;
  private decoded: (string | undefined)[] | undefined;
  private few: Map<number, string> | undefined;
  private decode: ((start: number, end: number) => string) | undefined;
  readonly length: number;

  constructor(source: readonly string[] | RawStrings) {
    if (Array.isArray(source)) {
      this.raw = undefined;
      this.decoded = source.slice();
      this.length = source.length;
    } else {
      const raw = source as RawStrings;
      this.raw = raw;
      this.decoded = undefined;
      this.length = itemCount(raw);
    }
  }

  at(i: number): string {
    if (i < 0 || i >= this.length) outOfRange(i, this.length);
    let cache = this.decoded;
    if (cache === undefined) {
      // A few reads (a listing shows 8 items, a detector 1) use a small map; a packed cache
      // of `length` slots costs as much as the parse for a 262k vocabulary, so it waits.
      const few = (this.few ??= new Map());
      const hit = few.get(i);
      if (hit !== undefined) return hit;
      const s = this.decodeAt(i);
      if (few.size < SPARSE_CACHE_LIMIT) few.set(i, s);
      else {
        cache = this.decoded = emptyCache(this.length);
        for (const [k, v] of few) cache[k] = v;
        cache[i] = s;
        this.few = undefined;
      }
      return s;
    }
    let s = cache[i];
    if (s === undefined) {
      s = this.decodeAt(i);
      cache[i] = s;
    }
    return s;
  }

  private decodeAt(i: number): string {
    const raw = this.raw!;
    const start = itemStart(raw, i);
    this.decode ??= sliceDecoder(raw.region);
    return this.decode(start, start + itemLength(raw, i));
  }

  toArray(): string[] {
    if (this.raw === undefined) return (this.decoded as string[]).slice();
    if (this.decoded === undefined) {
      // Decode everything in one pass and keep it as the cache.
      const { region, starts, lengths } = this.raw;
      const all = decodeItems(region, starts, lengths);
      this.decoded = all;
      return all.slice();
    }
    const out: string[] = [];
    for (let i = 0; i < this.length; i++) out.push(this.at(i));
    return out;
  }

  /** The first `n` items; a parsed array stays undecoded (a view of the same bytes). */
  head(n: number): StringArray {
    const k = Math.max(0, Math.min(n, this.length));
    if (this.raw === undefined) return new StringArray((this.decoded as string[]).slice(0, k));
    const raw = this.raw;
    const end = raw instanceof ParsedStrings ? raw.endOf(k) : k === 0 ? 0 : raw.starts[k - 1]! + raw.lengths[k - 1]!;
    const region = raw.region.subarray(0, end);
    const out = new StringArray(
      raw instanceof ParsedStrings
        ? new ParsedStrings(region, k, raw.littleEndian, raw.marksBelow(k))
        : { region, starts: raw.starts.subarray(0, k), lengths: raw.lengths.subarray(0, k), littleEndian: raw.littleEndian },
    );
    if (this.decoded !== undefined) out.decoded = this.decoded.slice(0, k);
    return out;
  }

  /** UTF-8 bytes of item i without decoding (a view for parsed arrays). */
  bytesAt(i: number): Uint8Array {
    if (i < 0 || i >= this.length) outOfRange(i, this.length);
    if (this.raw !== undefined) {
      const start = itemStart(this.raw, i);
      return this.raw.region.subarray(start, start + itemLength(this.raw, i));
    }
    return encodeUtf8(this.decoded![i]!);
  }
}

/** Arrays of arrays (itemType ARRAY); every item is itself a GgufArray. */
export class NestedArray implements GgufArray {
  readonly kind = "array" as const;
  readonly itemType = GgufValueType.ARRAY;
  constructor(readonly items: readonly GgufArray[]) {}
  get length(): number {
    return this.items.length;
  }
  at(i: number): GgufArray {
    if (i < 0 || i >= this.items.length) outOfRange(i, this.items.length);
    return this.items[i]!;
  }
  toArray(): GgufArray[] {
    return this.items.slice();
  }
}

export function isGgufArray(x: unknown): x is GgufArray {
  return typeof x === "object" && x !== null && (x as GgufArray).kind === "array" && typeof (x as GgufArray).at === "function";
}

const INT_RANGES: Partial<Record<GgufValueType, readonly [number, number]>> = {
  [GgufValueType.UINT8]: [0, 0xff],
  [GgufValueType.INT8]: [-0x80, 0x7f],
  [GgufValueType.UINT16]: [0, 0xffff],
  [GgufValueType.INT16]: [-0x8000, 0x7fff],
  [GgufValueType.UINT32]: [0, 0xffffffff],
  [GgufValueType.INT32]: [-0x80000000, 0x7fffffff],
};

const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

function badValue(type: GgufValueType, value: unknown, expected: string): never {
  const shown = typeof value === "bigint" ? `${value}n` : typeof value === "string" ? JSON.stringify(value) : String(value);
  throw new GgufError("BAD_VALUE", `${shown} is not a valid ${valueTypeName(type)} value`, { expected });
}

/**
 * Check (and normalize) a scalar for a value type: numbers for 8/16/32-bit types and floats,
 * bigint for 64-bit ints (safe-integer numbers are accepted and converted), boolean, string.
 */
export function checkScalar(type: GgufValueType, value: unknown): GgufValue {
  const range = INT_RANGES[type];
  if (range !== undefined) {
    if (typeof value !== "number" || !Number.isInteger(value) || value < range[0] || value > range[1]) {
      badValue(type, value, `an integer in [${range[0]}, ${range[1]}]`);
    }
    return value;
  }
  switch (type) {
    case GgufValueType.FLOAT32:
    case GgufValueType.FLOAT64:
      if (typeof value !== "number") badValue(type, value, "a number");
      return value;
    case GgufValueType.BOOL:
      if (typeof value !== "boolean") badValue(type, value, "a boolean");
      return value;
    case GgufValueType.STRING:
      if (typeof value !== "string") badValue(type, value, "a string");
      return value;
    case GgufValueType.UINT64:
    case GgufValueType.INT64: {
      let v: bigint;
      if (typeof value === "bigint") v = value;
      else if (typeof value === "number" && Number.isSafeInteger(value)) v = BigInt(value);
      else badValue(type, value, "a bigint (or safe integer)");
      const [lo, hi] = type === GgufValueType.UINT64 ? [0n, U64_MAX] : [I64_MIN, I64_MAX];
      if (v < lo || v > hi) badValue(type, value, `a value in [${lo}, ${hi}]`);
      return v;
    }
    case GgufValueType.ARRAY:
      if (!isGgufArray(value)) badValue(type, value, "a GgufArray (use ggufArray())");
      return value;
    default:
      throw new GgufError("BAD_VALUE_TYPE", `unknown value type ${type as number}`, { expected: "0..12" });
  }
}

export type ArrayInput =
  | GgufArray
  | ArrayLike<number>
  | ArrayLike<bigint>
  | ArrayLike<boolean>
  | ArrayLike<string>
  | ArrayLike<GgufArray>
  | NumberTypedArray
  | BigIntTypedArray;

/**
 * Build a GgufArray of `itemType` from plain values or a typed array (typed arrays of the
 * matching kind are used as-is). Values are range-checked like scalars.
 */
export function ggufArray(itemType: GgufValueType, values: ArrayInput): GgufArray {
  if (isGgufArray(values)) {
    if (values.itemType !== itemType) {
      throw new GgufError("BAD_VALUE", `array has item type ${valueTypeName(values.itemType)}`, {
        expected: valueTypeName(itemType),
      });
    }
    return values;
  }
  if (!isValueType(itemType)) {
    throw new GgufError("BAD_VALUE_TYPE", `unknown array item type ${itemType as number}`, { expected: "0..12" });
  }
  const n = values.length;
  if (isNumberItemType(itemType)) {
    const Ctor = typedArrayFor(itemType);
    if (values instanceof Ctor) return new NumberArray(itemType, values);
    const out = new Ctor(n);
    for (let i = 0; i < n; i++) out[i] = checkScalar(itemType, (values as ArrayLike<unknown>)[i]) as number;
    return new NumberArray(itemType, out);
  }
  switch (itemType) {
    case GgufValueType.UINT64:
    case GgufValueType.INT64: {
      const Ctor = typedArrayFor(itemType);
      if (values instanceof Ctor) return new BigIntArray(itemType, values);
      const out = new Ctor(n);
      for (let i = 0; i < n; i++) out[i] = checkScalar(itemType, (values as ArrayLike<unknown>)[i]) as bigint;
      return new BigIntArray(itemType, out);
    }
    case GgufValueType.BOOL: {
      if (values instanceof Uint8Array) return new BoolArray(values);
      const out = new Uint8Array(n);
      for (let i = 0; i < n; i++) out[i] = checkScalar(itemType, (values as ArrayLike<unknown>)[i]) ? 1 : 0;
      return new BoolArray(out);
    }
    case GgufValueType.STRING: {
      const out: string[] = [];
      for (let i = 0; i < n; i++) out.push(checkScalar(itemType, (values as ArrayLike<unknown>)[i]) as string);
      return new StringArray(out);
    }
    default: {
      const out: GgufArray[] = [];
      for (let i = 0; i < n; i++) out.push(checkScalar(GgufValueType.ARRAY, (values as ArrayLike<unknown>)[i]) as GgufArray);
      return new NestedArray(out);
    }
  }
}

type TypedCtor = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): NumberTypedArray | BigIntTypedArray;
};

/** A typed array of the item type's kind viewing `buffer` (byteOffset must be aligned). */
export function typedArrayView(type: number, buffer: ArrayBufferLike, byteOffset: number, length: number): NumberTypedArray | BigIntTypedArray {
  const Ctor = typedArrayFor(type) as unknown as TypedCtor;
  return new Ctor(buffer, byteOffset, length);
}
