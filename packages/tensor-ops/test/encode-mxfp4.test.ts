/** Checks the testkit's MXFP4 encoder (used by fixtures) against this package's dequantizer. */
import { describe, expect, it } from "vitest";
import { GgmlType } from "@compat/gguf";
import { toF32 } from "@compat/tensor-ops";
import { encodeMXFP4 } from "@compat/testkit";

describe("encodeMXFP4", () => {
  it("lays values out as ggml's block_mxfp4: exponent byte, value j low nibble, j+16 high nibble", () => {
    // absmax 6 -> exponent floor(log2 6) - 2 + 127 = 127, scale 2^-1: codes are the doubled E2M1 values.
    const values = new Float32Array(32);
    values[0] = 6; // code 7 (12 * 0.5)
    values[16] = -1; // code 10 (-2 * 0.5)
    values[1] = 0.5; // code 1
    const bytes = encodeMXFP4(values);
    expect(bytes.length).toBe(17);
    expect(bytes[0]).toBe(127);
    expect(bytes[1]).toBe(7 | (10 << 4));
    expect(bytes[2]).toBe(1);
    expect(Array.from(toF32(GgmlType.MXFP4, bytes))).toEqual(Array.from(values));
  });

  it("round-trips through the tensor-ops dequantizer within half a step", () => {
    const values = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i * 0.7) * 0.3);
    const back = toF32(GgmlType.MXFP4, encodeMXFP4(values));
    for (let b = 0; b < 2; b++) {
      const block = values.subarray(b * 32, b * 32 + 32);
      const amax = Math.max(...Array.from(block, Math.abs));
      const step = Math.pow(2, Math.floor(Math.log2(amax)) - 2 - 1) * 4; // widest code gap (8 -> 12) times the scale
      for (let j = 0; j < 32; j++) expect(Math.abs(back[b * 32 + j]! - block[j]!)).toBeLessThanOrEqual(step / 2 + 1e-7);
    }
  });

  it("rejects a length that is not a whole number of blocks", () => {
    expect(() => encodeMXFP4(new Float32Array(31))).toThrow(RangeError);
  });
});
