// Parsed string arrays decode through Node's utf8Slice (or a JS decoder without Buffer):
// toArray, item reads and the slice decoder must give back exactly the strings written, for
// any mix of ASCII, non-ASCII, empty, NUL-holding and long (>= 128 byte) items, in both byte orders.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, parseGguf, serializeGguf } from "@compat/gguf";
import type { StringArray } from "@compat/gguf/advanced";
import { decodeUtf8, sliceDecoder } from "../src/utf8";

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
  return parseGguf(await serializeGguf(m)).getArray("k") as StringArray;
}

describe("decoding parsed string arrays", () => {
  it("toArray, at() and the slice decoder give back the written strings", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(item, { maxLength: 60 }), fc.boolean(), async (items, le) => {
        expect((await parsed(items, le)).toArray()).toEqual(items);
        const fresh = await parsed(items, le);
        expect(Array.from({ length: items.length }, (_, i) => fresh.at(i))).toEqual(items);
        // items are located on demand: any access order, heads and raw bytes agree
        const backwards = await parsed(items, le);
        expect(Array.from({ length: items.length }, (_, i) => backwards.at(items.length - 1 - i)).reverse()).toEqual(items);
        const k = items.length >> 1;
        expect((await parsed(items, le)).head(k).toArray()).toEqual(items.slice(0, k));
        const raw = await parsed(items, le);
        expect(Array.from({ length: items.length }, (_, i) => Buffer.from(raw.bytesAt(i)).toString())).toEqual(items);
        const { region, starts, lengths } = (fresh as unknown as { raw: { region: Uint8Array; starts: Uint32Array; lengths: Uint32Array } }).raw;
        const node = sliceDecoder(region);
        expect(Array.from(starts, (s, i) => node(s, s + lengths[i]!))).toEqual(items);
        expect(Array.from(starts, (s, i) => decodeUtf8(region, s, s + lengths[i]!))).toEqual(items);
        // like Buffer#toString, an end past the region is clamped
        if (items.length > 0) expect(node(starts[0]!, region.length + 10)).toBe(Buffer.from(region).toString("utf8", starts[0]!));
      }),
      { numRuns: 300 },
    );
  });
});
