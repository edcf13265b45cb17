import { describe, expect, it } from "vitest";
import { GgmlType, GgufError, GgufModel, GgufValueType, parseGguf, readGguf, serializeGguf, tensorByteSize, bufferSource, type GgufErrorCode } from "@compat/gguf";
import { RawGguf } from "./helpers/raw";

/** Parse must fail with a GgufError of `code` (sync buffer parser and async chunked reader agree). */
async function expectCode(bytes: Uint8Array, code: GgufErrorCode): Promise<GgufError> {
  let syncErr: unknown;
  try {
    parseGguf(bytes, "bad.gguf", { fileSize: bytes.length });
  } catch (e) {
    syncErr = e;
  }
  expect(syncErr).toBeInstanceOf(GgufError);
  expect((syncErr as GgufError).code).toBe(code);
  expect((syncErr as GgufError).source).toBe("bad.gguf");
  expect((syncErr as GgufError).message).toContain("bad.gguf");
  const src = { ...bufferSource(bytes, "bad.gguf") };
  await expect(readGguf(src, { initialChunk: 16 })).rejects.toMatchObject({ name: "GgufError", code });
  return syncErr as GgufError;
}

function f32Tensor(m: GgufModel, name: string, n: number): void {
  m.addTensor({ name, type: GgmlType.F32, shape: [n], data: { kind: "bytes", bytes: new Uint8Array(n * 4).fill(1) } });
}

describe("hostile input", () => {
  it("every truncation of a valid file is a typed error", async () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    m.setArray("a", GgufValueType.STRING, ["one", "two", "ü"]);
    m.setArray("n", GgufValueType.ARRAY, [m.getArray("a")]);
    m.setF32("f", 1.5);
    f32Tensor(m, "t0", 3);
    f32Tensor(m, "t1", 8);
    const full = await serializeGguf(m);
    for (let len = 0; len < full.length; len++) {
      const cut = full.subarray(0, len);
      await expect(readGguf(cut)).rejects.toBeInstanceOf(GgufError);
      await expect(readGguf({ ...bufferSource(cut) }, { initialChunk: 7 })).rejects.toBeInstanceOf(GgufError);
    }
    await expect(readGguf(full)).resolves.toBeInstanceOf(GgufModel);
  });

  it("reports the offset and what was expected", async () => {
    const bytes = new RawGguf().header(0, 1).str("k").i32(4).u8(1).build();
    const e = await expectCode(bytes, "TRUNCATED");
    expect(e.offset).toBe(24 + 9 + 4);
    expect(e.expected).toMatch(/4 more bytes/);
  });

  it("rejects bad magic and unsupported versions", async () => {
    await expectCode(new Uint8Array([0x47, 0x47, 0x4d, 0x4c, 1, 0, 0, 0]), "BAD_MAGIC");
    const v1 = await expectCode(new RawGguf().header(0, 0, 1).build(), "UNSUPPORTED_VERSION");
    expect(v1.message).toMatch(/version 1 is not supported/);
    await expectCode(new RawGguf().header(0, 0, 4).build(), "UNSUPPORTED_VERSION");
    await expectCode(new RawGguf().header(0, 0, 0).build(), "UNSUPPORTED_VERSION");
  });

  it("rejects counts larger than the file could hold before allocating", async () => {
    await expectCode(new RawGguf().header(0, 2n ** 40n).build(), "COUNT_TOO_LARGE");
    await expectCode(new RawGguf().header(2n ** 62n, 0).build(), "COUNT_TOO_LARGE");
    await expectCode(new RawGguf().header(0, 2n ** 64n - 1n).build(), "COUNT_TOO_LARGE");
    // array claims a billion u32s in a tiny file
    await expectCode(new RawGguf().header(0, 1).str("k").i32(9).i32(4).u64(1_000_000_000).zeros(16).build(), "COUNT_TOO_LARGE");
    // string array: each item needs at least its 8-byte length
    await expectCode(new RawGguf().header(0, 1).str("k").i32(9).i32(8).u64(100).zeros(700).build(), "COUNT_TOO_LARGE");
    // nested arrays: each item needs type + count
    await expectCode(new RawGguf().header(0, 1).str("k").i32(9).i32(9).u64(10).zeros(100).build(), "COUNT_TOO_LARGE");
  });

  it("bounds nested arrays by count, not only by bytes (a header of millions of empty arrays)", async () => {
    // 100,000 empty nested arrays: 1.2 MB of input that would be 100,000 objects
    const raw = new RawGguf().header(0, 1).str("k").i32(9).i32(9).u64(100_000);
    for (let i = 0; i < 100_000; i++) raw.i32(4).u64(0);
    const e = await expectCode(raw.build(), "COUNT_TOO_LARGE");
    expect(e.message).toMatch(/nested arrays/);
    // the same budget across keys
    const many = new RawGguf().header(0, 2);
    for (const key of ["a", "b"]) {
      many.str(key).i32(9).i32(9).u64(40_000);
      for (let i = 0; i < 40_000; i++) many.i32(4).u64(0);
    }
    await expectCode(many.build(), "COUNT_TOO_LARGE");
  });

  it("rejects string lengths past the end of the file", async () => {
    await expectCode(new RawGguf().header(0, 1).u64(1_000_000).zeros(20).build(), "STRING_TOO_LONG");
    await expectCode(new RawGguf().header(0, 1).u64(2n ** 63n).zeros(20).build(), "STRING_TOO_LONG");
    await expectCode(new RawGguf().header(0, 1).str("k").i32(8).u64(50).zeros(10).build(), "STRING_TOO_LONG");
    await expectCode(new RawGguf().header(0, 1).str("k").i32(9).i32(8).u64(2).str("ok").u64(999).zeros(8).build(), "STRING_TOO_LONG");
    await expectCode(new RawGguf().header(1, 0).u64(10_000).zeros(30).build(), "STRING_TOO_LONG");
  });

  it("rejects unknown value types", async () => {
    const e = await expectCode(new RawGguf().header(0, 1).str("k").i32(13).u32(0).build(), "BAD_VALUE_TYPE");
    expect(e.offset).toBe(24 + 9);
    await expectCode(new RawGguf().header(0, 1).str("k").i32(-1).u32(0).build(), "BAD_VALUE_TYPE");
    await expectCode(new RawGguf().header(0, 1).str("k").i32(9).i32(99).u64(0).build(), "BAD_VALUE_TYPE");
  });

  it("rejects nesting deeper than the limit without blowing the stack", async () => {
    const r = new RawGguf().header(0, 1).str("k").i32(9);
    for (let i = 0; i < 100; i++) r.i32(9).u64(1);
    r.i32(4).u64(0);
    await expectCode(r.build(), "BAD_VALUE_TYPE");
  });

  it("rejects unknown or removed ggml types", async () => {
    for (const type of [4, 5, 31, 36, 43, 1000, -1]) {
      await expectCode(new RawGguf().header(1, 0).tensor("t", [32], type, 0).padTo(32).zeros(64).build(), "BAD_GGML_TYPE");
    }
  });

  it("rejects bad shapes and dimension products that overflow", async () => {
    await expectCode(new RawGguf().header(1, 0).tensor("t", [2n ** 40n, 2n ** 40n], GgmlType.F32, 0).build(), "SHAPE_OVERFLOW");
    await expectCode(new RawGguf().header(1, 0).tensor("t", [2n ** 60n], GgmlType.F32, 0).build(), "SHAPE_OVERFLOW");
    await expectCode(new RawGguf().header(1, 0).tensor("t", [2n ** 26n, 2n ** 26n, 2n ** 2n], GgmlType.F32, 0).build(), "SHAPE_OVERFLOW");
    await expectCode(new RawGguf().header(1, 0).tensor("t", [-1n], GgmlType.F32, 0).build(), "BAD_SHAPE");
    await expectCode(new RawGguf().header(1, 0).tensor("t", [1, 1, 1, 1, 1], GgmlType.F32, 0).build(), "BAD_SHAPE");
    await expectCode(new RawGguf().header(1, 0).tensor("t", [33], GgmlType.Q4_0, 0).padTo(32).zeros(64).build(), "BAD_SHAPE");
  });

  it("rejects tensor offsets out of order, overlapping, misaligned or past EOF", async () => {
    const two = (o0: number, o1: number, dataBytes = 256) =>
      new RawGguf().header(2, 0).tensor("a", [16], GgmlType.F32, o0).tensor("b", [16], GgmlType.F32, o1).padTo(32).zeros(dataBytes).build();
    await expect(readGguf(two(0, 64))).resolves.toBeInstanceOf(GgufModel);
    await expectCode(two(64, 0), "TENSOR_OFFSET"); // out of order
    await expectCode(two(0, 32), "TENSOR_OFFSET"); // overlaps a (64 bytes)
    await expectCode(two(0, 0), "TENSOR_OFFSET"); // same place
    await expectCode(two(0, 80), "TENSOR_OFFSET"); // not aligned
    await expectCode(two(0, 224), "TENSOR_OFFSET"); // ends past EOF
    await expectCode(two(0, 2 ** 53 + 64), "TENSOR_OFFSET"); // not representable
    // the data section itself starts past the end of the file
    await expectCode(new RawGguf().header(1, 0).tensor("a", [0], GgmlType.F32, 0).build(), "TRUNCATED");
  });

  it("rejects duplicate keys and tensor names, and empty keys", async () => {
    await expectCode(new RawGguf().header(0, 2).kvU32("a", 1).kvU32("a", 2).build(), "DUPLICATE_KEY");
    await expectCode(new RawGguf().header(0, 1).kvU32("", 1).build(), "EMPTY_KEY");
    await expectCode(
      new RawGguf().header(2, 0).tensor("a", [8], GgmlType.F32, 0).tensor("a", [8], GgmlType.F32, 32).padTo(32).zeros(64).build(),
      "DUPLICATE_TENSOR",
    );
  });

  it("rejects alignment 0, non powers of two and the wrong type", async () => {
    await expectCode(new RawGguf().header(0, 1).kvU32("general.alignment", 0).build(), "BAD_ALIGNMENT");
    await expectCode(new RawGguf().header(0, 1).kvU32("general.alignment", 48).build(), "BAD_ALIGNMENT");
    await expectCode(new RawGguf().header(0, 1).str("general.alignment").i32(10).u64(32).build(), "BAD_ALIGNMENT");
    const ok = new RawGguf().header(1, 1).kvU32("general.alignment", 1).tensor("t", [3], GgmlType.I8, 0).zeros(3).build();
    const m = parseGguf(ok);
    expect(m.alignment).toBe(1);
    expect(await serializeGguf(m)).toEqual(ok);
  });

  it("rejects invalid UTF-8 in keys, values, array items and tensor names", async () => {
    const bad = [0x61, 0xff, 0x62];
    await expectCode(new RawGguf().header(0, 1).str(bad).i32(4).u32(1).build(), "INVALID_UTF8");
    await expectCode(new RawGguf().header(0, 1).kvStr("k", bad).build(), "INVALID_UTF8");
    await expectCode(new RawGguf().header(0, 1).kvStr("k", [0xe2, 0x82]).build(), "INVALID_UTF8"); // cut sequence
    await expectCode(new RawGguf().header(0, 1).kvStr("k", [0xed, 0xa0, 0x80]).build(), "INVALID_UTF8"); // surrogate
    await expectCode(new RawGguf().header(0, 1).kvStr("k", [0xc0, 0xaf]).build(), "INVALID_UTF8"); // overlong
    await expectCode(new RawGguf().header(1, 0).tensor(bad, [8], GgmlType.F32, 0).padTo(32).zeros(32).build(), "INVALID_UTF8");
    const arr = (items: ArrayLike<number>[]) => {
      const r = new RawGguf().header(0, 1).str("k").i32(9).i32(8).u64(items.length);
      for (const it of items) r.str(it);
      return r.build();
    };
    const e = await expectCode(arr([[0x61], bad, [0x62]]), "INVALID_UTF8");
    expect(e.message).toMatch(/string 1/);
    // A string ending mid-sequence followed by a length whose low byte is a continuation byte:
    // the bytes read as one valid character across the boundary, but each string is invalid.
    await expectCode(arr([[0xc3], new Uint8Array(0xa9).fill(0x61)]), "INVALID_UTF8");
    await expectCode(arr([new Uint8Array(200).fill(0x61), [0x80]]), "INVALID_UTF8");
    // and valid multi-byte text survives the fast path, also around long (>= 128 byte) items
    const long = "é".repeat(100);
    const ok = new RawGguf().header(0, 1).str("k").i32(9).i32(8).u64(3).str("héllo").str(long).str("✓").build();
    expect(parseGguf(ok).getStringArray("k")).toEqual(["héllo", long, "✓"]);
  });

  it("never reads past what the header needs", async () => {
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    m.addTensor({ name: "big", type: GgmlType.F32, shape: [1 << 20], data: { kind: "bytes", bytes: new Uint8Array(tensorByteSize(GgmlType.F32, [1 << 20])) } });
    const bytes = await serializeGguf(m);
    const inner = bufferSource(bytes);
    let maxEnd = 0;
    const r = await readGguf({
      name: "spy",
      size: inner.size,
      read(offset, length) {
        maxEnd = Math.max(maxEnd, offset + length);
        return inner.read(offset, length);
      },
    }, { initialChunk: 64 });
    expect(r.tensors[0]!.data).toMatchObject({ kind: "range", offset: 128 });
    expect(maxEnd).toBeLessThan(1024);
  });
});
