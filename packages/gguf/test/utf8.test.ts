import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, parseGguf, serializeGguf } from "@compat/gguf";
import { decodeUtf8, encodeUtf8Into, isValidUtf8, sliceDecoder } from "../src/utf8";

describe("utf8 fast paths", () => {
  it("encode matches TextEncoder (incl. lone surrogates) and decode inverts it", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 80 }), (s) => {
        const expected = new TextEncoder().encode(s);
        const out = new Uint8Array(s.length * 3 + 4);
        const n = encodeUtf8Into(s, out, 2);
        expect(out.subarray(2, 2 + n)).toEqual(expected);
        expect(isValidUtf8(out, 2, 2 + n)).toBe(true);
        expect(decodeUtf8(out, 2, 2 + n)).toBe(new TextDecoder().decode(expected));
      }),
      { numRuns: 500 },
    );
  });

  it("keeps byte order marks and NULs in strings", async () => {
    const m = GgufModel.create();
    const items = ["\uFEFF", "\uFEFFa", "a\u0000b", "😀", ""];
    m.setArray("k", GgufValueType.STRING, items);
    m.setString("s", "\uFEFFbom");
    const back = parseGguf(await serializeGguf(m));
    expect(back.getStringArray("k")).toEqual(items);
    expect(back.getString("s")).toBe("\uFEFFbom");
    const bytes = new TextEncoder().encode("\uFEFFx");
    expect(sliceDecoder(bytes)(0, bytes.length)).toBe("\uFEFFx");
    expect(decodeUtf8(bytes, 0, bytes.length)).toBe("\uFEFFx");
  });
});
