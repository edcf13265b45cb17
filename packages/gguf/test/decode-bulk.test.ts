// StringArray.toArray decodes ASCII items as substrings of one string made from the whole
// region and the rest item by item: it must give exactly what per-item decoding gives, for
// any mix of ASCII, non-ASCII, empty, NUL-holding and long (>= 128 byte) items, in both byte orders.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, parseGguf, serializeGguf } from "@compat/gguf";
import { decodeSlices, decodeUtf8, oneByteString, sliceDecoder } from "../src/utf8";

const item = fc.oneof(
  fc.string({ unit: fc.constantFrom("a", "b", "Z", "0", " ", "<", "|", "\u0000", "\u007f"), maxLength: 20 }),
  fc.string({ unit: "grapheme", maxLength: 12 }),
  fc.string({ unit: "binary", maxLength: 12 }).map((s) => s.replace(/[\ud800-\udfff]/g, "?")),
  fc.string({ unit: fc.constantFrom("x", "Ġ", "é", "中", "😀"), minLength: 60, maxLength: 200 }),
  fc.constant(""),
);

async function parsed(items: string[], littleEndian: boolean) {
  const m = GgufModel.create({ littleEndian });
  m.setArray("k", GgufValueType.STRING, items);
  return parseGguf(await serializeGguf(m)).getArray("k");
}

describe("bulk decoding of parsed string arrays", () => {
  it("toArray equals item-by-item decoding and the original strings", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(item, { maxLength: 60 }), fc.boolean(), async (items, le) => {
        const arr = await parsed(items, le);
        expect(arr.toArray()).toEqual(items);
        const fresh = await parsed(items, le);
        expect(Array.from({ length: items.length }, (_, i) => fresh.at(i))).toEqual(items);
        const { region, starts, lengths } = (fresh as unknown as { raw: { region: Uint8Array; starts: Uint32Array; lengths: Uint32Array } }).raw;
        const one = sliceDecoder(region);
        expect(decodeSlices(region, starts, lengths, items.length)).toEqual(Array.from(starts, (s, i) => one(s, s + lengths[i]!)));
      }),
      { numRuns: 300 },
    );
  });

  it("the browser path (no Buffer: windows-1252 one-byte string, JS decoder) decodes the same", async () => {
    const items = ["abc", "Ġx", "", "中文", "a\u0000b", "é".repeat(100), "plain ascii that is long enough", "\u0080\u009f"];
    const arr = await parsed(items, true);
    const { region, starts, lengths } = (arr as unknown as { raw: { region: Uint8Array; starts: Uint32Array; lengths: Uint32Array } }).raw;
    const all = oneByteString(region, undefined);
    expect(decodeSlices(region, starts, lengths, items.length, all, (s, e) => decodeUtf8(region, s, e))).toEqual(items);
    // and without a one-byte string (regions too big for one V8 string): item by item
    expect(decodeSlices(region, starts, lengths, items.length, null)).toEqual(items);
  });
});
