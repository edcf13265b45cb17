import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { encodeBf16, encodeF16, encodeQ8_0, Prng, toBf16Bits, toHalfBits } from "@compat/testkit";

function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

describe("fixture encoders", () => {
  it("F16 bits of known values", () => {
    expect(toHalfBits(0)).toBe(0);
    expect(toHalfBits(-0)).toBe(0x8000);
    expect(toHalfBits(1)).toBe(0x3c00);
    expect(toHalfBits(-2)).toBe(0xc000);
    expect(toHalfBits(65504)).toBe(0x7bff);
    expect(toHalfBits(1e6)).toBe(0x7c00);
    expect(toHalfBits(2 ** -24)).toBe(0x0001);
    expect(toHalfBits(NaN) & 0x7c00).toBe(0x7c00);
  });

  it("F16 rounds to the nearest half (ties to even)", () => {
    fc.assert(
      fc.property(fc.float({ min: -60000, max: 60000, noNaN: true }), (x) => {
        const h = toHalfBits(x);
        const back = halfToFloat(h);
        // no other half is closer
        const up = halfToFloat((h & 0x8000) | ((h & 0x7fff) + 1));
        const down = (h & 0x7fff) === 0 ? back : halfToFloat((h & 0x8000) | ((h & 0x7fff) - 1));
        expect(Math.abs(back - x)).toBeLessThanOrEqual(Math.abs(up - x));
        expect(Math.abs(back - x)).toBeLessThanOrEqual(Math.abs(down - x));
      }),
    );
  });

  it("BF16 keeps the top half of the float, rounded", () => {
    expect(toBf16Bits(1)).toBe(0x3f80);
    expect(toBf16Bits(-1.5)).toBe(0xbfc0);
    expect(encodeBf16(new Float32Array([1]))).toEqual(new Uint8Array([0x80, 0x3f]));
    expect(encodeF16(new Float32Array([1]))).toEqual(new Uint8Array([0x00, 0x3c]));
  });

  it("Q8_0 blocks: f16 scale then 32 int8 that reconstruct within one step", () => {
    const rng = new Prng(5);
    const values = new Float32Array(64).map(() => rng.symmetric(2));
    const q = encodeQ8_0(values);
    expect(q.length).toBe(2 * 34);
    for (let b = 0; b < 2; b++) {
      const d = halfToFloat(q[b * 34]! | (q[b * 34 + 1]! << 8));
      for (let j = 0; j < 32; j++) {
        const qi = (q[b * 34 + 2 + j]! << 24) >> 24;
        expect(Math.abs(qi * d - values[b * 32 + j]!)).toBeLessThanOrEqual(d * 0.51 + 1e-3);
      }
    }
    expect(() => encodeQ8_0(new Float32Array(10))).toThrow(RangeError);
  });

  it("Prng streams depend only on seed and label", () => {
    const a = Prng.forLabel(1, "x");
    const b = Prng.forLabel(1, "x");
    const c = Prng.forLabel(1, "y");
    const seqA = [a.nextU32(), a.nextU32()];
    expect([b.nextU32(), b.nextU32()]).toEqual(seqA);
    expect([c.nextU32(), c.nextU32()]).not.toEqual(seqA);
  });
});
