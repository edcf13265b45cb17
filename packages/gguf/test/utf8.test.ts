import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, parseGguf, serializeGguf } from "@compat/gguf";
import { decodeUtf8, decodeUtf8Strict, encodeUtf8Into, isValidUtf8, nativeSlicer, sliceDecoder } from "../src/utf8";

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

  it("strict decode: the fatal decoder's answer, with Node's slicer and without", () => {
    const fatal = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    const bytesArb = fc.oneof(
      fc.uint8Array({ maxLength: 70 }),
      fc.uint8Array({ maxLength: 70, max: 0x7f }), // the short ASCII path
      fc.string({ unit: "binary", maxLength: 40 }).map((s) => new TextEncoder().encode(s)),
    );
    fc.assert(
      fc.property(bytesArb, fc.nat(3), fc.nat(3), (body, pre, post) => {
        const bytes = new Uint8Array(pre + body.length + post).fill(0xff);
        bytes.set(body, pre);
        let expected: string | undefined;
        try {
          expected = fatal.decode(body);
        } catch {
          expected = undefined;
        }
        const end = pre + body.length;
        expect(decodeUtf8Strict(bytes, pre, end)).toBe(expected);
        expect(decodeUtf8Strict(bytes, pre, end, nativeSlicer(bytes))).toBe(expected);
      }),
      { numRuns: 1000 },
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
