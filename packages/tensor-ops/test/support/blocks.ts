/**
 * Deterministic test inputs for every dequantizable type: random block bytes whose scale fields
 * are forced to finite values, so both ggml and this package produce NaN-free, comparable output.
 */
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import { mulberry32, randomBytes } from "./prng";

/** Byte offsets of f16 scale fields inside one block, per type. */
const F16_FIELDS: Partial<Record<number, readonly number[]>> = {
  [T.Q4_0]: [0],
  [T.Q4_1]: [0, 2],
  [T.Q5_0]: [0],
  [T.Q5_1]: [0, 2],
  [T.Q8_0]: [0],
  [T.Q2_K]: [80, 82],
  [T.Q3_K]: [108],
  [T.Q4_K]: [0, 2],
  [T.Q5_K]: [0, 2],
  [T.Q6_K]: [208],
  [T.IQ2_XXS]: [0],
  [T.IQ2_XS]: [0],
  [T.IQ2_S]: [0],
  [T.IQ3_XXS]: [0],
  [T.IQ3_S]: [0],
  [T.IQ1_S]: [0],
  [T.IQ4_NL]: [0],
  [T.IQ4_XS]: [0],
  [T.TQ1_0]: [52],
  [T.TQ2_0]: [64],
  [T.Q1_0]: [0],
  [T.Q2_0]: [0],
};

/** A random finite half (any sign, subnormals and zero included; never Inf or NaN). */
function finiteHalf(r: number): number {
  const h = r & 0xffff;
  return ((h >>> 10) & 0x1f) === 0x1f ? h & ~0x4000 : h;
}

export function sanitizeBlocks(type: number, bytes: Uint8Array, seed: number): Uint8Array {
  const layout = ggmlTypeInfo(type);
  const next = mulberry32(seed ^ 0x5eed);
  const out = bytes.slice();
  const view = new DataView(out.buffer);
  const nBlocks = out.byteLength / layout.typeSize;
  for (let b = 0; b < nBlocks; b++) {
    const o = b * layout.typeSize;
    for (const f of F16_FIELDS[type] ?? []) view.setUint16(o + f, finiteHalf(next()), true);
    if (type === T.Q8_K) view.setFloat32(o, ((next() / 4294967296) - 0.5) * 0.1, true);
    if (type === T.IQ1_M) {
      // The f16 super-scale is spread over the top nibbles of the four u16 scale words.
      const h = finiteHalf(next());
      for (let k = 0; k < 4; k++) {
        const at = o + 49 + 2 * k;
        out[at] = ((out[at] as number) & 0x0f) | (((h >>> (4 * k)) & 0xf) << 4);
      }
    }
  }
  return out;
}

/** Sanitized random blocks for `type`: `nBlocks` blocks from `seed`. */
export function randomBlocks(type: number, nBlocks: number, seed: number): Uint8Array {
  const layout = ggmlTypeInfo(type);
  return sanitizeBlocks(type, randomBytes(seed, nBlocks * layout.typeSize), seed);
}

/** Types that have a reference dequantizer in ggml (to_float, plus Q8_K's row function). */
export const DEQUANT_TYPES: readonly number[] = [
  T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K,
  T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.IQ4_NL, T.IQ4_XS,
  T.TQ1_0, T.TQ2_0, T.MXFP4, T.NVFP4, T.Q1_0, T.Q2_0,
];

/** Edge-case f32 bit patterns for the F32 -> F16/BF16 checks. */
export function edgeF32Bits(): Uint32Array {
  const list: number[] = [
    0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
    0x7f800001, 0x7fbfffff, 0xff800001, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x807fffff, 0x00800000,
    0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x477fffff, 0x47800000, // around f16 max (65504)
    0x38800000, 0x387fffff, 0x33800000, 0x33800001, 0x33000000, 0x33000001, 0x32ffffff, // f16 min normal/subnormal edges
    0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001, // ties to even in f16
    0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, // ties to even in bf16
  ];
  // Every f16 value and the midpoints between neighbours, expressed as f32 bits.
  return Uint32Array.from(list.map((v) => v >>> 0));
}
