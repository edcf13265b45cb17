/**
 * Bit-exact 16-bit float conversions, matching ggml's scalar helpers
 * (ggml_compute_fp16_to_fp32, ggml_compute_fp32_to_fp16, and the bf16 pair in ggml-impl.h).
 * All bulk functions work on raw little-endian bytes and never canonicalize NaN payloads.
 */

let f16Bits: Uint32Array | undefined;
let f16Values: Float32Array | undefined;

/** f32 bit pattern that ggml produces for one f16 bit pattern. */
function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) {
    // Inf stays Inf; NaN keeps its payload and comes out quiet, as the float multiply in ggml does.
    return (sign | 0x7f800000 | (mant << 13) | (mant === 0 ? 0 : 0x400000)) >>> 0;
  }
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0;
  if (mant === 0) return sign >>> 0;
  // Subnormal half: mant * 2^-24 is a normal f32; shift the leading one into the implicit bit.
  let e = 113; // biased f32 exponent of 2^-14
  let m = mant;
  while ((m & 0x400) === 0) {
    m <<= 1;
    e -= 1;
  }
  return (sign | (e << 23) | ((m & 0x3ff) << 13)) >>> 0;
}

/** 65536-entry table of f32 bit patterns, indexed by f16 bits (built once, 256 KiB). */
export function f16Table(): Uint32Array {
  if (!f16Bits) {
    const table = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) table[h] = f16BitsToF32Bits(h);
    f16Bits = table;
    f16Values = new Float32Array(table.buffer);
  }
  return f16Bits;
}

/** Same table viewed as floats, for use as a scale lookup inside dequant kernels. */
export function f16ValueTable(): Float32Array {
  if (!f16Values) f16Table();
  return f16Values as Float32Array;
}

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

function floatFromBits(bits: number): number {
  scratchU32[0] = bits;
  return scratchF32[0] as number;
}

function bitsFromFloat(value: number): number {
  scratchF32[0] = value;
  return scratchU32[0] as number;
}

const SCALE_TO_INF = 2 ** 112;
const SCALE_TO_ZERO = 2 ** -110;

/**
 * f16 bits for one f32 bit pattern, reproducing ggml's float-arithmetic rounding trick step by step
 * (each Math.fround is one single-precision operation in the C code). Round-to-nearest-even,
 * overflow to Inf, every NaN becomes 0x7E00 with the sign kept.
 */
export function f32BitsToF16Bits(w: number): number {
  w >>>= 0;
  const f = floatFromBits(w);
  let base = Math.fround(Math.fround(Math.abs(f) * SCALE_TO_INF) * SCALE_TO_ZERO);
  const shl1 = (w << 1) >>> 0;
  const sign = (w & 0x80000000) >>> 16;
  let bias = (shl1 & 0xff000000) >>> 0;
  if (bias < 0x71000000) bias = 0x71000000;
  base = Math.fround(floatFromBits(((bias >>> 1) + 0x07800000) >>> 0) + base);
  const bits = bitsFromFloat(base);
  const expBits = (bits >>> 13) & 0x7c00;
  const mantBits = bits & 0x0fff;
  return (sign | (shl1 > 0xff000000 ? 0x7e00 : expBits + mantBits)) & 0xffff;
}

/** bf16 bits for one f32 bit pattern: round-to-nearest-even, NaN forced quiet (ggml_compute_fp32_to_bf16). */
export function f32BitsToBf16Bits(w: number): number {
  w >>>= 0;
  if ((w & 0x7fffffff) >>> 0 > 0x7f800000) return ((w >>> 16) | 64) & 0xffff;
  return (Math.floor((w + 0x7fff + ((w >>> 16) & 1)) / 65536) & 0xffff) >>> 0;
}

/** One f16 bit pattern (a number 0..65535) as a JS number, exactly as ggml widens it. */
export function f16ToNumber(h: number): number {
  return f16ValueTable()[h & 0xffff] as number;
}

/** A number as f16 bits, rounded as ggml rounds an f32 (the number is first made an f32). */
export function numberToF16(value: number): number {
  return f32BitsToF16Bits(bitsFromFloat(value));
}

/** One bf16 bit pattern as a JS number. */
export function bf16ToNumber(h: number): number {
  return floatFromBits((h & 0xffff) << 16);
}

/** A number as bf16 bits, rounded as ggml rounds an f32 (nearest even, NaN made quiet). */
export function numberToBf16(value: number): number {
  return f32BitsToBf16Bits(bitsFromFloat(value));
}

/** A Uint16Array over the same bytes when aligned, otherwise over an aligned copy. */
export function u16View(bytes: Uint8Array): Uint16Array {
  if ((bytes.byteOffset & 1) === 0) return new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1);
  return new Uint16Array(bytes.slice().buffer, 0, bytes.byteLength >>> 1);
}

/** A Uint32Array over the same bytes when aligned, otherwise over an aligned copy. */
export function u32View(bytes: Uint8Array): Uint32Array {
  if ((bytes.byteOffset & 3) === 0) return new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
  return new Uint32Array(bytes.slice().buffer, 0, bytes.byteLength >>> 2);
}

/** Kernel: f16 bytes -> f32 output (bits copied through the table, so NaN payloads survive). */
export function f16BytesToF32(src: Uint8Array, dst: Float32Array, n: number): void {
  const table = f16Table();
  const input = u16View(src);
  const out = new Uint32Array(dst.buffer, dst.byteOffset, n);
  for (let i = 0; i < n; i++) out[i] = table[input[i] as number] as number;
}

export function bf16BytesToF32(src: Uint8Array, dst: Float32Array, n: number): void {
  const input = u16View(src);
  const out = new Uint32Array(dst.buffer, dst.byteOffset, n);
  for (let i = 0; i < n; i++) out[i] = (input[i] as number) << 16;
}

/** f32 bytes (or a Float32Array) -> f16 bytes. */
export function encodeF16(src: Uint8Array | Float32Array): Uint8Array {
  const input = src instanceof Float32Array ? new Uint32Array(src.buffer, src.byteOffset, src.length) : u32View(src);
  const out = new Uint16Array(input.length);
  for (let i = 0; i < input.length; i++) out[i] = f32BitsToF16Bits(input[i] as number);
  return new Uint8Array(out.buffer);
}

/** f32 bytes (or a Float32Array) -> bf16 bytes. */
export function encodeBf16(src: Uint8Array | Float32Array): Uint8Array {
  const input = src instanceof Float32Array ? new Uint32Array(src.buffer, src.byteOffset, src.length) : u32View(src);
  const out = new Uint16Array(input.length);
  for (let i = 0; i < input.length; i++) out[i] = f32BitsToBf16Bits(input[i] as number);
  return new Uint8Array(out.buffer);
}
