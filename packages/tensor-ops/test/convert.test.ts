import { describe, expect, it } from "vitest";
import { GgmlType as T, ggmlTypeInfo } from "@compat/gguf";
import {
  BlockAlignmentError,
  ByteLengthError,
  convertStream,
  fromF32,
  numberToF16,
  toF32,
  toF32Into,
  TensorOpsError,
  UnknownTypeError,
  UnsupportedTypeError,
} from "../src/index";
import { randomBlocks } from "./support/blocks";

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    if (error instanceof TensorOpsError) return error.code;
    throw error;
  }
  return undefined;
}

describe("bad input is rejected with a typed error before any output", () => {
  it("unknown type", () => {
    expect(() => toF32(4, new Uint8Array(0), 0)).toThrow(UnknownTypeError);
    expect(codeOf(() => toF32(99, new Uint8Array(4), 1))).toBe("UNKNOWN_TYPE");
  });
  it("known type without a float conversion names the type", () => {
    const error = (() => {
      try {
        toF32(T.I32, new Uint8Array(4), 1);
      } catch (e) {
        return e as UnsupportedTypeError;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(UnsupportedTypeError);
    expect(error?.code).toBe("UNSUPPORTED_TYPE");
    expect(error?.typeName).toBe("i32");
    expect(error?.message).toContain("i32");
  });
  it("wrong byte length for the element count", () => {
    expect(() => toF32(T.Q8_0, new Uint8Array(33), 32)).toThrow(ByteLengthError);
    expect(codeOf(() => toF32(T.F16, new Uint8Array(3), 2))).toBe("BAD_BYTE_LENGTH");
    expect(codeOf(() => toF32(T.Q8_0, new Uint8Array(35)))).toBe("BAD_BYTE_LENGTH");
  });
  it("element count not a whole number of blocks", () => {
    expect(() => toF32(T.Q4_K, new Uint8Array(144), 255)).toThrow(BlockAlignmentError);
    expect(codeOf(() => toF32(T.Q4_0, new Uint8Array(18), 31))).toBe("UNALIGNED_BLOCKS");
  });
  it("a too-small output buffer leaves it untouched", () => {
    const out = new Float32Array(31).fill(7);
    expect(codeOf(() => toF32Into(T.Q8_0, randomBlocks(T.Q8_0, 1, 1), out, 32))).toBe("BAD_BYTE_LENGTH");
    expect(out.every((v) => v === 7)).toBe(true);
  });
});

describe("conversions", () => {
  it("accepts unaligned views", () => {
    const backing = new Uint8Array(7);
    new DataView(backing.buffer).setUint16(1, numberToF16(1.5), true);
    new DataView(backing.buffer).setUint16(3, numberToF16(-2), true);
    expect([...toF32(T.F16, backing.subarray(1, 5))]).toEqual([1.5, -2]);
  });
  it("F32 is copied, and fromF32 round-trips F16", () => {
    const v = Float32Array.of(1, -0.5, 65504);
    expect([...toF32(T.F32, new Uint8Array(v.buffer), 3)]).toEqual([1, -0.5, 65504]);
    expect([...toF32(T.F16, fromF32(T.F16, v), 3)]).toEqual([1, -0.5, 65504]);
    expect(() => fromF32(T.Q4_0, v)).toThrow(UnsupportedTypeError);
  });
});

async function collect(gen: AsyncIterable<Float32Array>): Promise<Float32Array> {
  const parts: number[] = [];
  for await (const chunk of gen) parts.push(...chunk);
  return Float32Array.from(parts);
}

function* pieces(bytes: Uint8Array, sizes: number[]): Generator<Uint8Array> {
  let at = 0;
  let i = 0;
  while (at < bytes.byteLength) {
    const n = sizes[i++ % sizes.length] as number;
    yield bytes.subarray(at, at + n);
    at += n;
  }
}

describe("convertStream", () => {
  it("gives the same result as whole-tensor conversion for any input chunking", async () => {
    for (const type of [T.Q6_K, T.Q8_0, T.F16, T.MXFP4]) {
      const layout = ggmlTypeInfo(type);
      const nBlocks = 37;
      const bytes = randomBlocks(type, nBlocks, 5);
      const whole = toF32(type, bytes, nBlocks * layout.blockSize);
      for (const sizes of [[1], [7, 300, 2], [bytes.byteLength], [layout.typeSize * 3 + 1]]) {
        const streamed = await collect(
          convertStream(type, pieces(bytes, sizes), { chunkElements: layout.blockSize * 5, nElements: nBlocks * layout.blockSize }),
        );
        expect(streamed).toEqual(whole);
      }
    }
  });
  it("yields block-aligned chunks no larger than requested", async () => {
    const bytes = randomBlocks(T.Q4_K, 10, 9);
    const sizes: number[] = [];
    for await (const chunk of convertStream(T.Q4_K, pieces(bytes, [100]), { chunkElements: 600 })) sizes.push(chunk.length);
    expect(sizes).toEqual([512, 512, 512, 512, 512]);
  });
  it("reuses one output buffer when asked", async () => {
    const bytes = randomBlocks(T.Q8_0, 8, 2);
    const buffers = new Set<ArrayBufferLike>();
    for await (const chunk of convertStream(T.Q8_0, [bytes], { chunkElements: 64, reuseOutput: true })) buffers.add(chunk.buffer);
    expect(buffers.size).toBe(1);
  });
  it("rejects a trailing partial block, a short stream, an overlong stream and bad types", async () => {
    const bytes = randomBlocks(T.Q8_0, 4, 3);
    await expect(collect(convertStream(T.Q8_0, [bytes.subarray(0, 100)]))).rejects.toMatchObject({ code: "BAD_BYTE_LENGTH" });
    await expect(collect(convertStream(T.Q8_0, [bytes], { nElements: 160 }))).rejects.toMatchObject({ code: "BAD_BYTE_LENGTH" });
    await expect(collect(convertStream(T.Q8_0, [bytes], { nElements: 64 }))).rejects.toMatchObject({ code: "BAD_BYTE_LENGTH" });
    await expect(collect(convertStream(T.Q8_0, [bytes], { nElements: 65 }))).rejects.toMatchObject({ code: "UNALIGNED_BLOCKS" });
    await expect(collect(convertStream(T.I8, [bytes]))).rejects.toMatchObject({ code: "UNSUPPORTED_TYPE" });
    await expect(collect(convertStream(3.5, [bytes]))).rejects.toMatchObject({ code: "UNKNOWN_TYPE" });
  });
});
