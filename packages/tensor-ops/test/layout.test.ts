import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgmlType as T } from "@compat/gguf";
import {
  addScalar,
  concat,
  concatPieces,
  deinterleaveExperts,
  fromF32,
  interleaveExperts,
  inversePermutation,
  numberToF16,
  padAxis,
  padRows,
  permute,
  permuteQK,
  resamplePositionGrid,
  setBackend,
  split,
  stack,
  stackPieces,
  TensorOpsError,
  toF32,
  truncateRows,
  unpermuteQK,
  zeros,
  type Dtype,
  type TensorBytes,
} from "../src/index";
import { randomBlocks } from "./support/blocks";
import { randomBytes } from "./support/prng";

const u8 = (...v: number[]) => Uint8Array.from(v);
const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (e) {
    if (e instanceof TensorOpsError) return e.code;
    throw e;
  }
  return undefined;
};

/** Arbitrary tensor: rank 1..4, small dims, element size 1..6 bytes (odd sizes exercise the byte path). */
const tensorArb = fc
  .record({
    shape: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 4 }),
    elementBytes: fc.constantFrom(1, 2, 3, 4, 6),
    seed: fc.integer(),
  })
  .map(({ shape, elementBytes, seed }) => {
    const n = shape.reduce((a, b) => a * b, 1) * elementBytes;
    return { t: { data: randomBytes(seed, n), shape } as TensorBytes, dtype: { elementBytes } as Dtype };
  });

describe("permute", () => {
  it("follows numpy transpose semantics on ggml shapes", () => {
    // shape [2,3,4]: element (i0,i1,i2) holds i0 + 2*i1 + 6*i2.
    const t = { data: Uint8Array.from({ length: 24 }, (_, i) => i), shape: [2, 3, 4] };
    const p = permute(t, { elementBytes: 1 }, [2, 0, 1]);
    expect(p.shape).toEqual([4, 2, 3]);
    // output (a,b,c) = input (i0=b, i1=c, i2=a)
    for (let c = 0; c < 3; c++) for (let b = 0; b < 2; b++) for (let a = 0; a < 4; a++) {
      expect(p.data[a + 4 * b + 8 * c]).toBe(b + 2 * c + 6 * a);
    }
  });
  it("moves quantized rows whole and refuses to split blocks", () => {
    const rows = randomBlocks(T.Q8_0, 6, 4); // shape [32, 2, 3]
    const t = { data: rows, shape: [32, 2, 3] };
    const p = permute(t, T.Q8_0, [0, 2, 1]);
    expect(toF32(T.Q8_0, p.data, 192).subarray(32, 64)).toEqual(toF32(T.Q8_0, rows, 192).subarray(64, 96));
    expect(codeOf(() => permute(t, T.Q8_0, [1, 0, 2]))).toBe("BAD_SHAPE");
  });
  it("permute followed by its inverse is the identity", () => {
    fc.assert(
      fc.property(tensorArb, fc.integer(), ({ t, dtype }, s) => {
        const axes = fc.sample(fc.shuffledSubarray([...t.shape.keys()], { minLength: t.shape.length }), { seed: s, numRuns: 1 })[0] as number[];
        const back = permute(permute(t, dtype, axes), dtype, inversePermutation(axes));
        expect(back.shape).toEqual(t.shape);
        expect(back.data).toEqual(t.data);
      }),
      { numRuns: 300 },
    );
  });
  it("rejects a wrong byte length or a bad axis list", () => {
    expect(codeOf(() => permute({ data: new Uint8Array(5), shape: [2, 3] }, { elementBytes: 1 }, [1, 0]))).toBe("BAD_BYTE_LENGTH");
    expect(codeOf(() => permute({ data: new Uint8Array(6), shape: [2, 3] }, { elementBytes: 1 }, [0, 0]))).toBe("BAD_ARGUMENT");
  });
});

describe("LLaMA Q/K head permute", () => {
  it("matches convert_hf_to_gguf's reshape(n_head, 2, half).swapaxes(1, 2)", () => {
    // 2 heads of 4 rows each (half = 2), one byte per row.
    const t = { data: u8(0, 1, 2, 3, 4, 5, 6, 7), shape: [1, 8] };
    expect([...permuteQK(t, { elementBytes: 1 }, 2).data]).toEqual([0, 2, 1, 3, 4, 6, 5, 7]);
    // With n_head_kv different from n_head, the kv count decides the grouping.
    expect([...permuteQK(t, { elementBytes: 1 }, 4, 1).data]).toEqual([0, 4, 1, 5, 2, 6, 3, 7]);
  });
  it("works on quantized rows and on 1-D biases", () => {
    const q = { data: randomBlocks(T.Q4_K, 8, 3), shape: [256, 8] };
    const p = permuteQK(q, T.Q4_K, 2);
    expect(p.data.subarray(144, 288)).toEqual(q.data.subarray(288, 432));
    const bias = { data: new Uint8Array(Float32Array.of(0, 1, 2, 3).buffer), shape: [4] };
    expect([...new Float32Array(permuteQK(bias, T.F32, 1).data.buffer)]).toEqual([0, 2, 1, 3]);
  });
  it("unpermute inverts permute", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 3 }), fc.integer(),
        (heads, half, cols, kvDiv, seed) => {
          const kv = heads % kvDiv === 0 ? heads / kvDiv : heads;
          const rows = kv * 2 * half;
          const t = { data: randomBytes(seed, rows * cols * 2), shape: [cols, rows] };
          const back = unpermuteQK(permuteQK(t, T.F16, heads, kv), T.F16, heads, kv);
          expect(back.data).toEqual(t.data);
        },
      ),
      { numRuns: 200 },
    );
  });
  it("rejects rows that do not divide into heads", () => {
    expect(codeOf(() => permuteQK({ data: new Uint8Array(6), shape: [1, 6] }, { elementBytes: 1 }, 2))).toBe("BAD_SHAPE");
  });
});

describe("concat / split / experts", () => {
  it("concat along the slowest axis appends", () => {
    const a = { data: u8(1, 2, 3, 4), shape: [2, 2] };
    const b = { data: u8(5, 6), shape: [2, 1] };
    expect(concat([a, b], { elementBytes: 1 })).toEqual({ data: u8(1, 2, 3, 4, 5, 6), shape: [2, 3] });
    expect(concat([a, b], { elementBytes: 1 }, 1).data).toEqual(u8(1, 2, 3, 4, 5, 6));
    expect(codeOf(() => concat([a, { data: u8(1, 2, 3), shape: [3, 1] }], { elementBytes: 1 }))).toBe("BAD_SHAPE");
  });
  it("split after concat returns the parts, on every axis", () => {
    fc.assert(
      fc.property(tensorArb, fc.integer({ min: 1, max: 4 }), fc.nat(), ({ t, dtype }, extra, axisSeed) => {
        const axis = axisSeed % t.shape.length;
        const otherShape = [...t.shape];
        otherShape[axis] = extra;
        const eb = (dtype as { elementBytes: number }).elementBytes;
        const other = { data: randomBytes(axisSeed, otherShape.reduce((x, y) => x * y, 1) * eb), shape: otherShape };
        const joined = concat([t, other], dtype, axis);
        const [p, q] = split(joined, dtype, axis, [t.shape[axis] as number, extra]);
        expect(p).toEqual({ data: t.data, shape: [...t.shape] });
        expect(q).toEqual(other);
      }),
      { numRuns: 300 },
    );
  });
  it("concatPieces and stackPieces describe concat's and stack's bytes: the pieces laid side by side are the output", () => {
    const joined = (parts: readonly TensorBytes[], pieces: readonly { part: number; offset: number; length: number }[]) =>
      Uint8Array.from(pieces.flatMap((p) => [...parts[p.part]!.data.subarray(p.offset, p.offset + p.length)]));
    fc.assert(
      fc.property(tensorArb, fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 3 }), fc.nat(), ({ t, dtype }, extras, axisSeed) => {
        const axis = axisSeed % t.shape.length;
        const eb = (dtype as { elementBytes: number }).elementBytes;
        const parts = [t, ...extras.map((n, i) => {
          const shape = [...t.shape];
          shape[axis] = n;
          return { data: randomBytes(axisSeed + i, shape.reduce((x, y) => x * y, 1) * eb), shape };
        })];
        const want = concat(parts, dtype, axis);
        const got = concatPieces(parts.map((p) => p.shape), dtype, axis)!;
        expect(got.shape).toEqual(want.shape);
        expect(joined(parts, got.pieces)).toEqual(want.data);
        // a join along the slowest axis is one piece per part that has bytes
        if (axis === t.shape.length - 1) expect(got.pieces.length).toBe(parts.filter((p) => p.data.length > 0).length);
        const same = [t, { data: randomBytes(axisSeed + 9, t.data.length), shape: t.shape }];
        const st = stackPieces(same.map((p) => p.shape), dtype);
        expect(joined(same, st.pieces)).toEqual(stack(same, dtype).data);
        expect(st.pieces.length).toBe(2);
      }),
      { numRuns: 300 },
    );
    // past the bound, no description (the caller computes the join instead)
    expect(concatPieces([[2, 8], [2, 8]], { elementBytes: 1 }, 0, 15)).toBeUndefined();
    expect(concatPieces([[2, 8], [2, 8]], { elementBytes: 1 }, 0, 16)?.pieces.length).toBe(16);
  });
  it("interleaves per-expert gate and up the way ffn_gate_up_exps expects", () => {
    // [n_embd=32 (one Q8_0 block), n_ff=2, n_expert=3]
    const gate = { data: randomBlocks(T.Q8_0, 6, 1), shape: [32, 2, 3] };
    const up = { data: randomBlocks(T.Q8_0, 6, 2), shape: [32, 2, 3] };
    const fused = interleaveExperts(gate, up, T.Q8_0);
    expect(fused.shape).toEqual([32, 4, 3]);
    const rows = (d: Uint8Array, i: number, n = 1) => d.subarray(i * 34, (i + n) * 34);
    for (let e = 0; e < 3; e++) {
      expect(rows(fused.data, e * 4, 2)).toEqual(rows(gate.data, e * 2, 2));
      expect(rows(fused.data, e * 4 + 2, 2)).toEqual(rows(up.data, e * 2, 2));
    }
    expect(deinterleaveExperts(fused, T.Q8_0)).toEqual({ gate, up });
  });
  it("interleave and de-interleave are inverses", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 4 }), fc.integer(), (embd, ff, experts, seed) => {
        const n = embd * ff * experts * 2;
        const gate = { data: randomBytes(seed, n), shape: [embd, ff, experts] };
        const up = { data: randomBytes(seed + 1, n), shape: [embd, ff, experts] };
        const { gate: g, up: u } = deinterleaveExperts(interleaveExperts(gate, up, T.BF16), T.BF16);
        expect(g).toEqual(gate);
        expect(u).toEqual(up);
        const fused = interleaveExperts(g, u, T.BF16);
        const again = deinterleaveExperts(fused, T.BF16);
        expect(interleaveExperts(again.gate, again.up, T.BF16)).toEqual(fused);
      }),
      { numRuns: 200 },
    );
  });
  it("split validates sizes", () => {
    expect(codeOf(() => split({ data: u8(1, 2, 3), shape: [3] }, { elementBytes: 1 }, 0, [1, 1]))).toBe("BAD_SHAPE");
  });
  it("splits quantized rows only on block boundaries", () => {
    const t = { data: randomBlocks(T.Q4_0, 4, 1), shape: [64, 2] };
    const [a, b] = split(t, T.Q4_0, 0, [32, 32]);
    expect(a?.data).toEqual(concat([{ data: t.data.subarray(0, 18), shape: [32, 1] }, { data: t.data.subarray(36, 54), shape: [32, 1] }], T.Q4_0, 1).data);
    expect(b?.shape).toEqual([32, 2]);
    expect(codeOf(() => split(t, T.Q4_0, 0, [16, 48]))).toBe("UNALIGNED_BLOCKS");
  });
  it("stack puts equally shaped parts one after another along a new slowest axis", () => {
    const parts = [{ data: u8(1, 2, 3, 4), shape: [2, 2] }, { data: u8(5, 6, 7, 8), shape: [2, 2] }, { data: u8(9, 10, 11, 12), shape: [2, 2] }];
    expect(stack(parts, { elementBytes: 1 })).toEqual({ data: u8(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), shape: [2, 2, 3] });
    expect(codeOf(() => stack([parts[0]!, { data: u8(1, 2, 3, 4), shape: [4, 1] }], { elementBytes: 1 }))).toBe("BAD_SHAPE");
    expect(codeOf(() => stack([], { elementBytes: 1 }))).toBe("BAD_ARGUMENT");
  });
  it("stack keeps quantized blocks intact: part e decodes to slab e", () => {
    const parts = [0, 1, 2].map((e) => ({ data: randomBlocks(T.Q8_0, 2, 10 + e), shape: [32, 2] }));
    const stacked = stack(parts, T.Q8_0);
    expect(stacked.shape).toEqual([32, 2, 3]);
    const all = toF32(T.Q8_0, stacked.data, 192);
    parts.forEach((p, e) => expect(all.subarray(e * 64, (e + 1) * 64)).toEqual(toF32(T.Q8_0, p.data, 64)));
  });
});

describe("rows: truncate, pad, zeros", () => {
  it("truncates the slowest axis for any dtype", () => {
    const t = { data: randomBlocks(T.Q6_K, 5, 1), shape: [256, 5] };
    expect(truncateRows(t, T.Q6_K, 3)).toEqual({ data: t.data.subarray(0, 630), shape: [256, 3] });
    expect(codeOf(() => truncateRows(t, T.Q6_K, 6))).toBe("BAD_SHAPE");
  });
  it("pads with zero rows that decode to 0.0", () => {
    const t = { data: randomBlocks(T.Q4_K, 2, 1), shape: [256, 2] };
    const p = padRows(t, T.Q4_K, 4);
    expect(p.shape).toEqual([256, 4]);
    expect(p.data.subarray(0, 288)).toEqual(t.data);
    expect(toF32(T.Q4_K, p.data, 1024).subarray(512).every((v) => v === 0)).toBe(true);
    expect(padAxis({ data: u8(1, 2, 3, 4), shape: [2, 2] }, { elementBytes: 1 }, 0, 3).data).toEqual(u8(1, 2, 0, 3, 4, 0));
    expect(zeros([32, 2], T.Q8_0).data.byteLength).toBe(68);
  });
});

describe("addScalar", () => {
  it("adds in f32 and rounds back like ggml", () => {
    const f32 = new Uint8Array(Float32Array.of(0, -1, 0.5).buffer);
    expect([...new Float32Array(addScalar(T.F32, f32, 1).buffer)]).toEqual([1, 0, 1.5]);
    const f16 = fromF32(T.F16, Float32Array.of(0, -1, 0.5, 2048));
    // 2048 + 1 = 2049 is a tie in f16 (spacing 2) and rounds to even: 2048.
    expect([...toF32(T.F16, addScalar(T.F16, f16, 1))]).toEqual([1, 0, 1.5, 2048]);
    const bf = new Uint8Array(Uint16Array.of(0x3f80, 0x0000).buffer); // 1.0, 0.0
    expect([...toF32(T.BF16, addScalar(T.BF16, bf, 1), 2)]).toEqual([2, 1]);
    expect(codeOf(() => addScalar(T.Q8_0, new Uint8Array(34), 1))).toBe("UNSUPPORTED_TYPE");
    expect(numberToF16(2049)).toBe(numberToF16(2048));
  });
});

/** The blend written out per value (four neighbours, Ollama's order): the oracle for the row-sharing implementation. */
function resampleDirect(src: Float32Array, e: number, sh: number, sw: number, dh: number, dw: number): Float32Array {
  const at = (t: number, to: number, from: number) => (to <= 1 ? 0 : (t * (from - 1)) / (to - 1));
  const f = Math.fround;
  const out = new Float32Array(e * dh * dw);
  for (let y = 0; y < dh; y++) {
    const sy = at(y, dh, sh);
    const y0 = Math.floor(sy);
    const y1 = Math.min(y0 + 1, sh - 1);
    const wy = f(sy - y0);
    const wy1 = f(1 - wy);
    for (let x = 0; x < dw; x++) {
      const sx = at(x, dw, sw);
      const x0 = Math.floor(sx);
      const x1 = Math.min(x0 + 1, sw - 1);
      const wx = f(sx - x0);
      const wx1 = f(1 - wx);
      for (let k = 0; k < e; k++) {
        const v = (yy: number, xx: number) => src[(yy * sw + xx) * e + k]!;
        const top = f(f(v(y0, x0) * wx1) + f(v(y0, x1) * wx));
        const bottom = f(f(v(y1, x0) * wx1) + f(v(y1, x1) * wx));
        out[(y * dw + x) * e + k] = f(top * wy1) + f(bottom * wy);
      }
    }
  }
  return out;
}

describe("resamplePositionGrid", () => {
  it.each(["js", "auto"] as const)("property: gives the bits of the four-neighbour blend for any grid and sizes (fast-check, %s backend)", (backend) => {
    setBackend(backend);
    fc.assert(
      fc.property(
        fc.record({ e: fc.integer({ min: 1, max: 5 }), sh: fc.integer({ min: 1, max: 9 }), sw: fc.integer({ min: 1, max: 9 }), dh: fc.integer({ min: 1, max: 14 }), dw: fc.integer({ min: 1, max: 14 }) }),
        fc.integer(),
        ({ e, sh, sw, dh, dw }, seed) => {
          const src = Float32Array.from({ length: e * sh * sw }, (_, i) => Math.sin(seed + i * 12.9898) * 1000);
          const got = resamplePositionGrid(src, { embedding: e, srcHeight: sh, srcWidth: sw, dstHeight: dh, dstWidth: dw });
          expect(new Uint32Array(got.buffer)).toEqual(new Uint32Array(resampleDirect(src, e, sh, sw, dh, dw).buffer));
        },
      ),
      { numRuns: 500 },
    );
    setBackend("auto");
  });
  it("is the identity when the size does not change", () => {
    const src = Float32Array.from({ length: 3 * 4 * 4 }, (_, i) => Math.sin(i));
    expect(resamplePositionGrid(src, { embedding: 3, srcHeight: 4, srcWidth: 4, dstHeight: 4, dstWidth: 4 })).toEqual(src);
  });
  it("keeps corners and blends the middle (align corners)", () => {
    // 2x2 grid, one channel: 0 1 / 2 3 -> 3x3
    const out = resamplePositionGrid(Float32Array.of(0, 1, 2, 3), { embedding: 1, srcHeight: 2, srcWidth: 2, dstHeight: 3, dstWidth: 3 });
    expect([...out]).toEqual([0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3]);
  });
  it("downsamples with endpoint-aligned coordinates", () => {
    // 1-D along x: 5 -> 3 picks 0, 2, 4 exactly.
    const src = Float32Array.of(10, 11, 12, 13, 14);
    expect([...resamplePositionGrid(src, { embedding: 1, srcHeight: 1, srcWidth: 5, dstHeight: 1, dstWidth: 3 })]).toEqual([10, 12, 14]);
    expect(codeOf(() => resamplePositionGrid(src, { embedding: 2, srcHeight: 1, srcWidth: 5, dstHeight: 1, dstWidth: 3 }))).toBe("BAD_SHAPE");
  });
});

describe("F16 round trip", () => {
  it("every finite half survives F16 -> F32 -> F16 (all 63488 enumerated)", () => {
    const finite = Uint16Array.from({ length: 65536 }, (_, i) => i).filter((h) => ((h >>> 10) & 0x1f) !== 0x1f);
    expect(finite.length).toBe(63488);
    const back = new Uint16Array(fromF32(T.F16, toF32(T.F16, new Uint8Array(finite.buffer))).buffer);
    expect(back).toEqual(finite);
  });
  it("property: any finite half round-trips (fast-check)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffff }).filter((h) => ((h >>> 10) & 0x1f) !== 0x1f), (h) => {
        const back = new Uint16Array(fromF32(T.F16, toF32(T.F16, new Uint8Array(Uint16Array.of(h).buffer))).buffer)[0];
        expect(back).toBe(h);
      }),
    );
  });
});
