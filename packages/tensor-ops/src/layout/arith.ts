/**
 * Element arithmetic on float tensors stored as raw bytes: adding a scalar (the RMSNorm "+1"
 * weight shift) and bilinear resampling of a position-embedding grid.
 */
import { ArgumentError, ByteLengthError, ShapeError, UnsupportedTypeError } from "../errors";
import { f32BitsToBf16Bits, f32BitsToF16Bits, f16Table, u16View, u32View } from "../half";
import { nativeAddon } from "../native";
import { GgmlType } from "@compat/gguf";
import { typeInfo } from "../types";

const fround = Math.fround;

/**
 * Returns a copy of `bytes` (F32, F16 or BF16) with `value` added to every element, computed in
 * f32 and rounded back to the storage type with ggml's rounding.
 */
export function addScalar(type: number, bytes: Uint8Array, value: number): Uint8Array {
  const v = fround(value);
  const f32 = new Float32Array(1);
  const bits = new Uint32Array(f32.buffer);
  if (type === GgmlType.F32) {
    if (bytes.byteLength % 4 !== 0) throw new ByteLengthError("F32 data must be whole 4-byte elements", bytes.byteLength - (bytes.byteLength % 4), bytes.byteLength);
    const src = u32View(bytes);
    const out = new Float32Array(src.length);
    const srcF = new Float32Array(src.buffer, src.byteOffset, src.length);
    for (let i = 0; i < src.length; i++) out[i] = (srcF[i] as number) + v;
    return new Uint8Array(out.buffer);
  }
  if (type === GgmlType.F16 || type === GgmlType.BF16) {
    if (bytes.byteLength % 2 !== 0) throw new ByteLengthError(`${typeInfo(type).name} data must be whole 2-byte elements`, bytes.byteLength - 1, bytes.byteLength);
    const src = u16View(bytes);
    const out = new Uint16Array(src.length);
    const half = type === GgmlType.F16;
    const table = half ? f16Table() : undefined;
    for (let i = 0; i < src.length; i++) {
      const h = src[i] as number;
      bits[0] = half ? ((table as Uint32Array)[h] as number) : h << 16;
      f32[0] = (f32[0] as number) + v;
      out[i] = half ? f32BitsToF16Bits(bits[0] as number) : f32BitsToBf16Bits(bits[0] as number);
    }
    return new Uint8Array(out.buffer);
  }
  throw new UnsupportedTypeError(type, typeInfo(type).name, "addScalar");
}

export interface ResampleOptions {
  /** Values per position (ne[0] of the grid tensor). */
  embedding: number;
  srcHeight: number;
  srcWidth: number;
  dstHeight: number;
  dstWidth: number;
}

/** Source coordinate for target index `t` with align-corners mapping (endpoints map to endpoints). */
function alignCorners(t: number, targetSide: number, sourceSide: number): number {
  if (targetSide <= 1) return 0;
  return (t * (sourceSide - 1)) / (targetSide - 1);
}

/**
 * Bilinear, align-corners resample of a position-embedding grid laid out as ggml
 * [embedding, height*width] (position index y*width + x). Coordinates are computed in double and
 * the blend in f32, in the order Ollama's loader uses, so results match it bit for bit. The native
 * addon's kernel, when loaded, gives the same bits.
 */
export function resamplePositionGrid(src: Float32Array, options: ResampleOptions): Float32Array {
  const { embedding: e, srcHeight: sh, srcWidth: sw, dstHeight: dh, dstWidth: dw } = options;
  for (const [name, n] of Object.entries(options)) {
    if (!Number.isSafeInteger(n) || n <= 0) throw new ArgumentError(`${name} must be a positive integer, got ${String(n)}`);
  }
  if (src.length !== e * sh * sw) throw new ShapeError(`grid has ${src.length} values, expected ${e}*${sh}*${sw}`);
  const out = new Float32Array(e * dh * dw);
  if (nativeAddon()?.resampleGrid?.(src, out, e, sh, sw, dh, dw) === true) return out;
  // Blend along x once per source row, then each output row blends two of those rows along y.
  // The x blend does not depend on y, so sharing it between the output rows that use the same
  // source row gives the same bits as blending all four neighbours per value (about 2x faster).
  const x0s = new Int32Array(dw);
  const x1s = new Int32Array(dw);
  const wxs = new Float32Array(dw);
  for (let x = 0; x < dw; x++) {
    const sx = alignCorners(x, dw, sw);
    x0s[x] = Math.floor(sx);
    x1s[x] = Math.min(x0s[x]! + 1, sw - 1);
    wxs[x] = sx - x0s[x]!;
  }
  const blendRow = (r: number, into: Float32Array): void => {
    for (let x = 0; x < dw; x++) {
      const wx = wxs[x]!;
      const wx1 = fround(1 - wx);
      const p0 = (r * sw + x0s[x]!) * e;
      const p1 = (r * sw + x1s[x]!) * e;
      const o = x * e;
      for (let k = 0; k < e; k++) into[o + k] = fround((src[p0 + k] as number) * wx1) + fround((src[p1 + k] as number) * wx);
    }
  };
  // Two rows held: an output row needs rows y0 and y1, and the next one mostly the same pair.
  const rows = [new Float32Array(dw * e), new Float32Array(dw * e)];
  const held = [-1, -1];
  const rowAt = (r: number, keep: number): Float32Array => {
    if (held[0] === r) return rows[0]!;
    if (held[1] === r) return rows[1]!;
    const slot = held[0] === keep ? 1 : 0;
    blendRow(r, rows[slot]!);
    held[slot] = r;
    return rows[slot]!;
  };
  const n = dw * e;
  for (let y = 0; y < dh; y++) {
    const sy = alignCorners(y, dh, sh);
    const y0 = Math.floor(sy);
    const y1 = Math.min(y0 + 1, sh - 1);
    const wy = fround(sy - y0);
    const wy1 = fround(1 - wy);
    const top = rowAt(y0, y1);
    const bottom = rowAt(y1, y0);
    const o = y * n;
    for (let i = 0; i < n; i++) out[o + i] = fround((top[i] as number) * wy1) + fround((bottom[i] as number) * wy);
  }
  return out;
}
