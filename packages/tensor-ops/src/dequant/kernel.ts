/** A dequant kernel: `nBlocks` whole blocks from the start of `src` into the start of `dst`. */
export type DequantKernel = (src: Uint8Array, dst: Float32Array, nBlocks: number) => void;

/** Little-endian u16 at byte offset `o`. */
export function u16(b: Uint8Array, o: number): number {
  return (b[o] as number) | ((b[o + 1] as number) << 8);
}

/** Little-endian u32 at byte offset `o`. */
export function u32(b: Uint8Array, o: number): number {
  return ((b[o] as number) | ((b[o + 1] as number) << 8) | ((b[o + 2] as number) << 16) | ((b[o + 3] as number) << 24)) >>> 0;
}

export function i8(b: Uint8Array, o: number): number {
  return ((b[o] as number) << 24) >> 24;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** Little-endian f32 at byte offset `o`. */
export function f32(b: Uint8Array, o: number): number {
  u32Scratch[0] = u32(b, o);
  return f32Scratch[0] as number;
}

export function floatFromBits(bits: number): number {
  u32Scratch[0] = bits;
  return f32Scratch[0] as number;
}
