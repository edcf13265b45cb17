/** GGUF metadata value types, as numbered in the file format. */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/**
 * An array value. `items` holds plain JS values: numbers for 8/16/32-bit ints
 * and floats, bigint for 64-bit ints, boolean, string, or nested GgufArray.
 * Implementations may back numeric arrays with typed arrays and string arrays
 * lazily; callers only rely on `length`, indexing via `at(i)`, and `toArray()`.
 */
export interface GgufArray {
  readonly kind: "array";
  readonly itemType: GgufValueType;
  readonly length: number;
  at(index: number): GgufValue;
  toArray(): GgufValue[];
}

export type GgufValue = number | bigint | boolean | string | GgufArray;

/** One metadata entry with its on-disk type kept, so a rewrite is byte-identical. */
export interface GgufKv {
  readonly key: string;
  readonly type: GgufValueType;
  readonly value: GgufValue;
}

/** Random-access bytes: a local file, a buffer, or a browser Blob. */
export interface ByteSource {
  /** For errors: a path, "<buffer>", or the Blob's name. */
  readonly name: string;
  readonly size: number;
  read(offset: number, length: number): Promise<Uint8Array>;
  /** Optional: read `target.length` bytes at `offset` straight into `target` (saves a copy). */
  readInto?(target: Uint8Array, offset: number): Promise<void>;
  close?(): Promise<void>;
  /** Optional: the open file descriptor behind a local file, for in-kernel copies (WriteOptions.copyRange). */
  readonly fd?: number;
}

export type { RangeCopier } from "@compat/files";

/** An untouched byte range of a source (e.g. the original file). */
export interface RangeData {
  readonly kind: "range";
  readonly source: ByteSource;
  readonly offset: number;
  readonly length: number;
}

/** Bytes already in memory. */
export interface BytesData {
  readonly kind: "bytes";
  readonly bytes: Uint8Array;
}

/** Bytes produced on demand (e.g. a conversion over source ranges). `length` is exact. */
export interface ComputedData {
  readonly kind: "computed";
  readonly length: number;
  readonly label: string;
  produce(): Promise<Uint8Array>;
  /**
   * When the output only places bytes side by side (a concat along the slowest axis, a stack
   * of one type): the same bytes as produce()'s, as pieces in order. Readers may take them
   * instead: the writer copies them (in the kernel where it can), a lazy read reads only the
   * pieces it needs, a mount serves them as ranges of the source with nothing computed.
   */
  readonly parts?: readonly (RangeData | BytesData)[];
  /**
   * The data produce() reads, when the producer says so: a writer fed the source as it
   * arrives (streamWrite) computes the op once these have arrived, holding only them.
   */
  readonly inputs?: readonly TensorData[];
}

/** Where a tensor's bytes come from. */
export type TensorData = RangeData | BytesData | ComputedData;

export interface GgufTensor {
  name: string;
  /** ggml type number (see GgmlType). */
  type: number;
  /** ggml order: shape[0] is the fastest-varying dimension (ne[0]). */
  shape: number[];
  data: TensorData;
}
