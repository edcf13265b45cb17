import { Prng } from "@compat/testkit";

/** The testkit's seeded generator (mulberry32) as a u32 stream, for the vector generator and the tests. */
export function mulberry32(seed: number): () => number {
  const prng = new Prng(seed);
  return () => prng.nextU32();
}

/** `n` pseudo-random u32 values. */
export function randomU32(seed: number, n: number): Uint32Array {
  const next = mulberry32(seed);
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = next();
  return out;
}

/** `n` pseudo-random bytes. */
export function randomBytes(seed: number, n: number): Uint8Array {
  const words = randomU32(seed, Math.ceil(n / 4));
  return new Uint8Array(words.buffer, 0, n).slice();
}

/** Roughly normal f32 values with the given spread (sum of uniforms), deterministic per seed. */
export function randomNormals(seed: number, n: number, scale = 1): Float32Array {
  const next = mulberry32(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    let s = 0;
    for (let k = 0; k < 4; k++) s += next() / 4294967296;
    out[i] = (s - 2) * scale * 1.7;
  }
  return out;
}
