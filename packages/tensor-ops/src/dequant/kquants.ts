/**
 * Dequantization of the 256-element super-block formats (K-quants, IQ4_XS, ternary TQ types).
 * Intermediate scales are rounded to f32 with Math.fround exactly where ggml's C code holds a float.
 */
import { f16ValueTable } from "../half";
import { f32, i8, u16, type DequantKernel } from "./kernel";
import { IQ4NL_VALUES } from "./simple";

const fround = Math.fround;

export const dequantQ2_K: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 84) {
    const d = h[u16(src, o + 80)] as number;
    const min = h[u16(src, o + 82)] as number;
    let is = 0;
    for (let half = 0; half < 2; half++) {
      const q = o + 16 + half * 32;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let part = 0; part < 2; part++) {
          const sc = src[o + is++] as number;
          const dl = fround(d * (sc & 15));
          const ml = fround(min * (sc >>> 4));
          const qp = q + part * 16;
          for (let l = 0; l < 16; l++) dst[y++] = fround(dl * (((src[qp + l] as number) >>> shift) & 3)) - ml;
        }
      }
    }
  }
};

const q3Scales = new Int8Array(16);

/** Unpacks Q3_K's twelve bytes of 6-bit scales into sixteen signed scales (already minus 32). */
function unpackQ3Scales(src: Uint8Array, o: number): Int8Array {
  for (let j = 0; j < 16; j++) {
    const low = j < 8 ? (src[o + j] as number) & 15 : (src[o + j - 8] as number) >>> 4;
    const high = ((src[o + 8 + (j & 3)] as number) >>> (2 * (j >>> 2))) & 3;
    q3Scales[j] = (low | (high << 4)) - 32;
  }
  return q3Scales;
}

export const dequantQ3_K: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 110) {
    const dAll = h[u16(src, o + 108)] as number;
    const scales = unpackQ3Scales(src, o + 96);
    const hm = o;
    let m = 1;
    let is = 0;
    for (let half = 0; half < 2; half++) {
      const q = o + 32 + half * 32;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let part = 0; part < 2; part++) {
          const dl = fround(dAll * (scales[is++] as number));
          const base = part * 16;
          for (let l = 0; l < 16; l++) {
            const low = ((src[q + base + l] as number) >>> shift) & 3;
            dst[y++] = dl * (low - ((src[hm + base + l] as number) & m ? 0 : 4));
          }
        }
        m <<= 1;
      }
    }
  }
};

/** The j-th 6-bit scale and min of a Q4_K/Q5_K block (12 packed bytes at `o`). */
function scaleMinK4(src: Uint8Array, o: number, j: number, out: Uint8Array): void {
  if (j < 4) {
    out[0] = (src[o + j] as number) & 63;
    out[1] = (src[o + j + 4] as number) & 63;
  } else {
    out[0] = ((src[o + j + 4] as number) & 15) | (((src[o + j - 4] as number) >>> 6) << 4);
    out[1] = ((src[o + j + 4] as number) >>> 4) | (((src[o + j] as number) >>> 6) << 4);
  }
}

const sm = new Uint8Array(2);
const dm = new Float64Array(4);

/** Scales and mins of sub-blocks `is` and `is + 1` of the Q4_K/Q5_K block at `o` (super-scale d, super-min min): d1, m1, d2, m2. */
function scalesK4(src: Uint8Array, o: number, is: number, d: number, min: number, out: Float64Array): void {
  scaleMinK4(src, o + 4, is, sm);
  out[0] = fround(d * (sm[0] as number));
  out[1] = fround(min * (sm[1] as number));
  scaleMinK4(src, o + 4, is + 1, sm);
  out[2] = fround(d * (sm[0] as number));
  out[3] = fround(min * (sm[1] as number));
}

export const dequantQ4_K: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 144) {
    const d = h[u16(src, o)] as number;
    const min = h[u16(src, o + 2)] as number;
    let q = o + 16;
    for (let is = 0; is < 8; is += 2, q += 32) {
      scalesK4(src, o, is, d, min, dm);
      const d1 = dm[0] as number, m1 = dm[1] as number, d2 = dm[2] as number, m2 = dm[3] as number;
      for (let l = 0; l < 32; l++) dst[y++] = fround(d1 * ((src[q + l] as number) & 15)) - m1;
      for (let l = 0; l < 32; l++) dst[y++] = fround(d2 * ((src[q + l] as number) >>> 4)) - m2;
    }
  }
};

export const dequantQ5_K: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 176) {
    const d = h[u16(src, o)] as number;
    const min = h[u16(src, o + 2)] as number;
    const qh = o + 16;
    let ql = o + 48;
    let u1 = 1;
    let u2 = 2;
    for (let is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      scalesK4(src, o, is, d, min, dm);
      const d1 = dm[0] as number, m1 = dm[1] as number, d2 = dm[2] as number, m2 = dm[3] as number;
      for (let l = 0; l < 32; l++) {
        const v = ((src[ql + l] as number) & 15) + ((src[qh + l] as number) & u1 ? 16 : 0);
        dst[y++] = fround(d1 * v) - m1;
      }
      for (let l = 0; l < 32; l++) {
        const v = ((src[ql + l] as number) >>> 4) + ((src[qh + l] as number) & u2 ? 16 : 0);
        dst[y++] = fround(d2 * v) - m2;
      }
    }
  }
};

export const dequantQ6_K: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 210) {
    const d = h[u16(src, o + 208)] as number;
    for (let n = 0; n < 2; n++, y += 128) {
      const ql = o + n * 64;
      const qh = o + 128 + n * 32;
      const sc = o + 192 + n * 8;
      for (let l = 0; l < 32; l++) {
        const is = l >>> 4;
        const a = src[ql + l] as number;
        const b = src[ql + l + 32] as number;
        const hb = src[qh + l] as number;
        const q1 = ((a & 15) | ((hb & 3) << 4)) - 32;
        const q2 = ((b & 15) | (((hb >>> 2) & 3) << 4)) - 32;
        const q3 = ((a >>> 4) | (((hb >>> 4) & 3) << 4)) - 32;
        const q4 = ((b >>> 4) | (((hb >>> 6) & 3) << 4)) - 32;
        dst[y + l] = fround(d * i8(src, sc + is)) * q1;
        dst[y + l + 32] = fround(d * i8(src, sc + is + 2)) * q2;
        dst[y + l + 64] = fround(d * i8(src, sc + is + 4)) * q3;
        dst[y + l + 96] = fround(d * i8(src, sc + is + 6)) * q4;
      }
    }
  }
};

export const dequantQ8_K: DequantKernel = (src, dst, nBlocks) => {
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 292) {
    const d = f32(src, o);
    for (let j = 0; j < 256; j++) dst[y++] = d * i8(src, o + 4 + j);
  }
};

export const dequantIQ4_XS: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 136) {
    const d = h[u16(src, o)] as number;
    const scalesH = u16(src, o + 2);
    for (let ib = 0; ib < 8; ib++, y += 32) {
      const ls = (((src[o + 4 + (ib >>> 1)] as number) >>> (4 * (ib & 1))) & 15) | (((scalesH >>> (2 * ib)) & 3) << 4);
      const dl = fround(d * (ls - 32));
      const qs = o + 8 + ib * 16;
      for (let j = 0; j < 16; j++) {
        const q = src[qs + j] as number;
        dst[y + j] = dl * (IQ4NL_VALUES[q & 15] as number);
        dst[y + j + 16] = dl * (IQ4NL_VALUES[q >>> 4] as number);
      }
    }
  }
};

/** Ternary digit `n` (0 = most significant) of a TQ1_0 byte, mapped to -1/0/1. */
function trit(byte: number, n: number): number {
  const q = (byte * (3 ** n)) & 255;
  return ((q * 3) >>> 8) - 1;
}

export const dequantTQ1_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 54) {
    const d = h[u16(src, o + 52)] as number;
    // qs is 48 bytes: one 32-byte group then one 16-byte group, five trits per byte.
    for (const [start, width] of [
      [0, 32],
      [32, 16],
    ] as const) {
      for (let n = 0; n < 5; n++) {
        for (let m = 0; m < width; m++) dst[y++] = trit(src[o + start + m] as number, n) * d;
      }
    }
    for (let n = 0; n < 4; n++) {
      for (let j = 0; j < 4; j++) dst[y++] = trit(src[o + 48 + j] as number, n) * d;
    }
  }
};

export const dequantTQ2_0: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 66) {
    const d = h[u16(src, o + 64)] as number;
    for (let j = 0; j < 64; j += 32) {
      for (let l = 0; l < 4; l++) {
        for (let m = 0; m < 32; m++) dst[y++] = ((((src[o + j + m] as number) >>> (l * 2)) & 3) - 1) * d;
      }
    }
  }
};
