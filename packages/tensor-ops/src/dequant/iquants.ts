/**
 * Dequantization of the lattice ("importance") quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS and IQ3_S. The codebooks are decoded once from the packed tables on first use.
 */
import { f16ValueTable } from "../half";
import {
  IQ1S_GRID,
  IQ2S_GRID,
  IQ2XS_GRID,
  IQ2XXS_GRID,
  IQ3S_GRID,
  IQ3XXS_GRID,
  type PackedGrid,
} from "../tables/iq-grids";
import { u16, u32, type DequantKernel } from "./kernel";

const fround = Math.fround;

function decode(grid: PackedGrid): Int16Array {
  const nibbles = Uint8Array.from(atob(grid.packed), (c) => c.charCodeAt(0));
  const out = new Int16Array(grid.entries * grid.bytesPerEntry);
  for (let i = 0; i < out.length; i++) {
    const nib = ((nibbles[i >>> 1] as number) >>> ((i & 1) * 4)) & 15;
    out[i] = grid.alphabet[nib] as number;
  }
  return out;
}

const cache = new Map<PackedGrid, Int16Array>();
function grid(g: PackedGrid): Int16Array {
  let decoded = cache.get(g);
  if (!decoded) {
    decoded = decode(g);
    cache.set(g, decoded);
  }
  return decoded;
}

/** ksigns_iq2xs: 7 stored sign bits plus an eighth that makes the count of set bits even. */
function signByte(seven: number): number {
  let parity = 0;
  for (let b = seven; b; b &= b - 1) parity ^= 1;
  return seven | (parity << 7);
}
const SIGNS = Uint8Array.from({ length: 128 }, (_, i) => signByte(i));

/** Writes 8 grid values times `db` with the sign bits of `signs` applied. */
function put8(dst: Float32Array, y: number, g: Int16Array, at: number, db: number, signs: number): void {
  for (let j = 0; j < 8; j++) {
    const v = fround(db * (g[at + j] as number));
    dst[y + j] = (signs >>> j) & 1 ? -v : v;
  }
}

export const dequantIQ2_XXS: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ2XXS_GRID);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 66) {
    const d = h[u16(src, o)] as number;
    for (let ib = 0; ib < 8; ib++) {
      const q = o + 2 + ib * 8;
      const aux1 = u32(src, q + 4);
      const db = fround(fround(d * (0.5 + (aux1 >>> 28))) * 0.25);
      for (let l = 0; l < 4; l++, y += 8) {
        put8(dst, y, g, (src[q + l] as number) * 8, db, SIGNS[(aux1 >>> (7 * l)) & 127] as number);
      }
    }
  }
};

export const dequantIQ2_XS: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ2XS_GRID);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 74) {
    const d = h[u16(src, o)] as number;
    for (let ib = 0; ib < 8; ib++) {
      const sc = src[o + 66 + ib] as number;
      const db0 = fround(fround(d * (0.5 + (sc & 15))) * 0.25);
      const db1 = fround(fround(d * (0.5 + (sc >>> 4))) * 0.25);
      for (let l = 0; l < 4; l++, y += 8) {
        const q = u16(src, o + 2 + 2 * (4 * ib + l));
        put8(dst, y, g, (q & 511) * 8, l < 2 ? db0 : db1, SIGNS[q >>> 9] as number);
      }
    }
  }
};

export const dequantIQ2_S: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ2S_GRID);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 82) {
    const d = h[u16(src, o)] as number;
    const qs = o + 2;
    const signs = o + 2 + 32;
    const qh = o + 66;
    for (let ib = 0; ib < 8; ib++) {
      const sc = src[o + 74 + ib] as number;
      const db0 = fround(fround(d * (0.5 + (sc & 15))) * 0.25);
      const db1 = fround(fround(d * (0.5 + (sc >>> 4))) * 0.25);
      const high = src[qh + ib] as number;
      for (let l = 0; l < 4; l++, y += 8) {
        const index = (src[qs + 4 * ib + l] as number) | ((high << (8 - 2 * l)) & 0x300);
        put8(dst, y, g, index * 8, l < 2 ? db0 : db1, src[signs + 4 * ib + l] as number);
      }
    }
  }
};

export const dequantIQ3_XXS: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ3XXS_GRID);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 98) {
    const d = h[u16(src, o)] as number;
    for (let ib = 0; ib < 8; ib++) {
      const aux = u32(src, o + 2 + 64 + 4 * ib);
      const db = fround(fround(d * (0.5 + (aux >>> 28))) * 0.5);
      const qs = o + 2 + 8 * ib;
      for (let l = 0; l < 4; l++, y += 8) {
        const signs = SIGNS[(aux >>> (7 * l)) & 127] as number;
        const g1 = (src[qs + 2 * l] as number) * 4;
        const g2 = (src[qs + 2 * l + 1] as number) * 4;
        for (let j = 0; j < 4; j++) {
          const a = fround(db * (g[g1 + j] as number));
          const b = fround(db * (g[g2 + j] as number));
          dst[y + j] = (signs >>> j) & 1 ? -a : a;
          dst[y + j + 4] = (signs >>> (j + 4)) & 1 ? -b : b;
        }
      }
    }
  }
};

export const dequantIQ3_S: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ3S_GRID);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 110) {
    const d = h[u16(src, o)] as number;
    let qs = o + 2;
    let qh = o + 66;
    let signs = o + 74;
    const scales = o + 106;
    for (let ib = 0; ib < 8; ib += 2) {
      const sc = src[scales + (ib >>> 1)] as number;
      for (let part = 0; part < 2; part++) {
        const db = fround(d * (1 + 2 * (part === 0 ? sc & 15 : sc >>> 4)));
        const high = src[qh + part] as number;
        for (let l = 0; l < 4; l++, y += 8) {
          const g1 = ((src[qs + 2 * l] as number) | ((high << (8 - 2 * l)) & 256)) * 4;
          const g2 = ((src[qs + 2 * l + 1] as number) | ((high << (7 - 2 * l)) & 256)) * 4;
          const s = src[signs + l] as number;
          for (let j = 0; j < 4; j++) {
            const a = fround(db * (g[g1 + j] as number));
            const b = fround(db * (g[g2 + j] as number));
            dst[y + j] = (s >>> j) & 1 ? -a : a;
            dst[y + j + 4] = (s >>> (j + 4)) & 1 ? -b : b;
          }
        }
        qs += 8;
        signs += 4;
      }
      qh += 2;
    }
  }
};

const IQ1_DELTA = 0.125;

/** The iq1s grid stores -1/0/1 as bytes 0xff/0x00/0x01. */
function iq1Value(byte: number): number {
  return (byte << 24) >> 24;
}

export const dequantIQ1_S: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ1S_GRID);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 50) {
    const d = h[u16(src, o)] as number;
    for (let ib = 0; ib < 8; ib++) {
      const qh = u16(src, o + 34 + 2 * ib);
      const dl = fround(d * (2 * ((qh >>> 12) & 7) + 1));
      const delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
      for (let l = 0; l < 4; l++, y += 8) {
        const index = ((src[o + 2 + 4 * ib + l] as number) | (((qh >>> (3 * l)) & 7) << 8)) * 8;
        for (let j = 0; j < 8; j++) dst[y + j] = dl * (iq1Value(g[index + j] as number) + delta);
      }
    }
  }
};

export const dequantIQ1_M: DequantKernel = (src, dst, nBlocks) => {
  const h = f16ValueTable();
  const g = grid(IQ1S_GRID);
  const delta = new Float64Array(4);
  const idx = new Uint16Array(4);
  for (let i = 0, o = 0, y = 0; i < nBlocks; i++, o += 56) {
    const sc0 = u16(src, o + 48);
    const sc1 = u16(src, o + 50);
    const sc2 = u16(src, o + 52);
    const sc3 = u16(src, o + 54);
    const scaleBits = (sc0 >>> 12) | ((sc1 >>> 8) & 0x00f0) | ((sc2 >>> 4) & 0x0f00) | (sc3 & 0xf000);
    const d = h[scaleBits] as number;
    const sc = [sc0, sc1, sc2, sc3];
    for (let ib = 0; ib < 8; ib++) {
      const s = sc[ib >>> 1] as number;
      const shift = 6 * (ib & 1);
      const dl1 = fround(d * (2 * ((s >>> shift) & 7) + 1));
      const dl2 = fround(d * (2 * ((s >>> (shift + 3)) & 7) + 1));
      const qs = o + 4 * ib;
      const qh0 = src[o + 32 + 2 * ib] as number;
      const qh1 = src[o + 32 + 2 * ib + 1] as number;
      idx[0] = (src[qs] as number) | ((qh0 << 8) & 0x700);
      idx[1] = (src[qs + 1] as number) | ((qh0 << 4) & 0x700);
      idx[2] = (src[qs + 2] as number) | ((qh1 << 8) & 0x700);
      idx[3] = (src[qs + 3] as number) | ((qh1 << 4) & 0x700);
      delta[0] = qh0 & 0x08 ? -IQ1_DELTA : IQ1_DELTA;
      delta[1] = qh0 & 0x80 ? -IQ1_DELTA : IQ1_DELTA;
      delta[2] = qh1 & 0x08 ? -IQ1_DELTA : IQ1_DELTA;
      delta[3] = qh1 & 0x80 ? -IQ1_DELTA : IQ1_DELTA;
      for (let l = 0; l < 4; l++, y += 8) {
        const dl = l < 2 ? dl1 : dl2;
        const at = (idx[l] as number) * 8;
        const dd = delta[l] as number;
        for (let j = 0; j < 8; j++) dst[y + j] = dl * (iq1Value(g[at + j] as number) + dd);
      }
    }
  }
};
