/**
 * Dequantization of the 32/64/128-element block formats (ggml-quants.c dequantize_row_*).
 * Every expression rounds to f32 where the C code does: a product of a small integer and an f32 is
 * exact in a double, so storing it into a Float32Array is the single rounding C performs.
 */
import { f16ValueTable } from "../half";
import { floatFromBits, i8, u16, u32, type DequantKernel } from "./kernel";

const fround = Math.fround;

/** Non-linear 4-bit codebook shared by IQ4_NL and IQ4_XS (kvalues_iq4nl). */
export const IQ4NL_VALUES = Int8Array.of(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

/** E2M1 values doubled, shared by MXFP4 and NVFP4 (kvalues_mxfp4). */
const FP4_VALUES = Int8Array.of(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);

/** Half of an E8M0 scale, 2^(e-128), as ggml_e8m0_to_fp32_half returns it (subnormal for e < 2). */
function e8m0Half(e: number): number {
  return floatFromBits(e < 2 ? 0x00200000 << e : (e - 1) << 23);
}

/** UE4M3 scale times 0.5 (ggml_ue4m3_to_fp32); 0 and 0x7F both mean zero. */
function ue4m3Half(x: number): number {
  if (x === 0 || x === 0x7f) return 0;
  const exp = (x >>> 3) & 0xf;
  const man = x & 7;
  const raw = exp === 0 ? man * 2 ** -9 : (1 + man / 8) * 2 ** (exp - 7);
  return fround(raw * 0.5);
}

export const dequantQ4_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 18, y += 32) {
    const d = h[u16(src, o)] as number;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j] as number;
      dst[y + j] = ((q & 15) - 8) * d;
      dst[y + j + 16] = ((q >>> 4) - 8) * d;
    }
  }
};

export const dequantQ4_1: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 20, y += 32) {
    const d = h[u16(src, o)] as number;
    const m = h[u16(src, o + 2)] as number;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 4 + j] as number;
      dst[y + j] = fround((q & 15) * d) + m;
      dst[y + j + 16] = fround((q >>> 4) * d) + m;
    }
  }
};

export const dequantQ5_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 22, y += 32) {
    const d = h[u16(src, o)] as number;
    const qh = u32(src, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 6 + j] as number;
      const hi0 = ((qh >>> j) << 4) & 0x10;
      const hi1 = (qh >>> (j + 12)) & 0x10;
      dst[y + j] = (((q & 15) | hi0) - 16) * d;
      dst[y + j + 16] = (((q >>> 4) | hi1) - 16) * d;
    }
  }
};

export const dequantQ5_1: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 24, y += 32) {
    const d = h[u16(src, o)] as number;
    const m = h[u16(src, o + 2)] as number;
    const qh = u32(src, o + 4);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 8 + j] as number;
      const hi0 = ((qh >>> j) << 4) & 0x10;
      const hi1 = (qh >>> (j + 12)) & 0x10;
      dst[y + j] = fround(((q & 15) | hi0) * d) + m;
      dst[y + j + 16] = fround(((q >>> 4) | hi1) * d) + m;
    }
  }
};

export const dequantQ8_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 34, y += 32) {
    const d = h[u16(src, o)] as number;
    for (let j = 0; j < 32; j++) dst[y + j] = i8(src, o + 2 + j) * d;
  }
};

export const dequantMXFP4: DequantKernel = (src, dst, nBlocks) => {
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 17, y += 32) {
    const d = e8m0Half(src[o] as number);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 1 + j] as number;
      dst[y + j] = (FP4_VALUES[q & 15] as number) * d;
      dst[y + j + 16] = (FP4_VALUES[q >>> 4] as number) * d;
    }
  }
};

export const dequantNVFP4: DequantKernel = (src, dst, nBlocks) => {
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 36, y += 64) {
    for (let s = 0; s < 4; s++) {
      const d = ue4m3Half(src[o + s] as number);
      const qs = o + 4 + s * 8;
      const yb = y + s * 16;
      for (let j = 0; j < 8; j++) {
        const q = src[qs + j] as number;
        dst[yb + j] = (FP4_VALUES[q & 15] as number) * d;
        dst[yb + j + 8] = (FP4_VALUES[q >>> 4] as number) * d;
      }
    }
  }
};

export const dequantIQ4_NL: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 18, y += 32) {
    const d = h[u16(src, o)] as number;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j] as number;
      dst[y + j] = d * (IQ4NL_VALUES[q & 15] as number);
      dst[y + j + 16] = d * (IQ4NL_VALUES[q >>> 4] as number);
    }
  }
};

export const dequantQ1_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 18, y += 128) {
    const d = h[u16(src, o)] as number;
    for (let j = 0; j < 128; j++) dst[y + j] = ((src[o + 2 + (j >>> 3)] as number) >>> (j & 7)) & 1 ? d : -d;
  }
};

export const dequantQ2_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 18, y += 64) {
    const d = h[u16(src, o)] as number;
    for (let j = 0; j < 64; j++) {
      const q = ((src[o + 2 + (j >>> 2)] as number) >>> ((j & 3) * 2)) & 3;
      dst[y + j] = (q - 1) * d;
    }
  }
};
