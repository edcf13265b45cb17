/**
 * Shared vocabulary for layout operations: a tensor is raw bytes plus a ggml shape (ne[0] fastest).
 * The element format is either a ggml type number (quantized types move in whole rows) or a plain
 * element size in bytes.
 */
import { ArgumentError, BlockAlignmentError, ByteLengthError, ShapeError } from "../errors";
import { typeInfo } from "../types";

export type Shape = readonly number[];

/** A ggml type number, or `{ elementBytes }` for an unquantized element of any size. */
export type Dtype = number | { readonly elementBytes: number };

export interface TensorBytes {
  readonly data: Uint8Array;
  /** ggml ne: shape[0] is the fastest-moving (contiguous) dimension. */
  readonly shape: Shape;
}

export interface Format {
  /** Elements per block (1 for plain element types). */
  readonly blockSize: number;
  /** Bytes per block. */
  readonly blockBytes: number;
  readonly name: string;
}

export function formatOf(dtype: Dtype): Format {
  if (typeof dtype === "number") {
    const info = typeInfo(dtype);
    return { blockSize: info.blockSize, blockBytes: info.typeSize, name: info.name };
  }
  const size = dtype.elementBytes;
  if (!Number.isSafeInteger(size) || size <= 0) throw new ArgumentError(`elementBytes must be a positive integer, got ${String(size)}`);
  return { blockSize: 1, blockBytes: size, name: `${size}-byte element` };
}

function checkShape(shape: Shape, what = "shape"): void {
  if (shape.length === 0) throw new ShapeError(`${what} must have at least one dimension`);
  let total = 1;
  for (const n of shape) {
    if (!Number.isSafeInteger(n) || n < 0) throw new ShapeError(`${what} [${shape.join(", ")}] has an invalid dimension`);
    total *= n;
    if (!Number.isSafeInteger(total)) throw new ShapeError(`${what} [${shape.join(", ")}] is too large`);
  }
}

export function product(values: readonly number[], from = 0, to = values.length): number {
  let p = 1;
  for (let i = from; i < to; i++) p *= values[i] as number;
  return p;
}

/** Bytes of one row (shape[0] elements); the row must be whole blocks. */
export function rowBytes(format: Format, ne0: number): number {
  if (ne0 % format.blockSize !== 0) throw new BlockAlignmentError(format.name, ne0, format.blockSize);
  return (ne0 / format.blockSize) * format.blockBytes;
}

/** Bytes of a contiguous tensor with this shape. */
function tensorBytes(format: Format, shape: Shape): number {
  checkShape(shape);
  return rowBytes(format, shape[0] as number) * product(shape, 1);
}

/** Validates that `t.data` has exactly the byte length its shape requires; returns that length. */
export function checkTensor(t: TensorBytes, format: Format, what = "tensor"): number {
  const expected = tensorBytes(format, t.shape);
  if (t.data.byteLength !== expected) {
    throw new ByteLengthError(`${what} of shape [${t.shape.join(", ")}] (${format.name})`, expected, t.data.byteLength);
  }
  return expected;
}

/** Bytes of the slab formed by dims 0..axis-1 (what one step along `axis` spans). */
function strideBytes(format: Format, shape: Shape, axis: number): number {
  if (axis === 0) return format.blockBytes / format.blockSize; // only meaningful for plain elements
  return rowBytes(format, shape[0] as number) * product(shape, 1, axis);
}

export function checkAxis(axis: number, rank: number): void {
  if (!Number.isInteger(axis) || axis < 0 || axis >= rank) throw new ArgumentError(`axis ${String(axis)} is out of range for rank ${rank}`);
}

/** Pads a shape with trailing 1s to `rank`. */
export function padShape(shape: Shape, rank: number): number[] {
  const out = [...shape];
  while (out.length < rank) out.push(1);
  return out;
}
