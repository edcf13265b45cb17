// Parsed string arrays decode on demand: item reads before and after the switch from the
// small per-item cache to the packed one give the same strings as a full decode.
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, bufferSource, parseGguf, readGguf, serializeGguf } from "@compat/gguf";

describe("StringArray.at on a parsed vocabulary", () => {
  it("agrees with toArray through and past the sparse cache", async () => {
    const words = Array.from({ length: 5000 }, (_, i) => (i % 7 === 0 ? `Ġ${i}é` : `t${i}`));
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, words);
    const bytes = await serializeGguf(m);
    const arr = parseGguf(bytes).getArray("tokenizer.ggml.tokens");
    for (let i = 0; i < words.length; i += 3) expect(arr.at(i)).toBe(words[i]);
    for (let i = words.length - 1; i >= 0; i -= 2) expect(arr.at(i)).toBe(words[i]);
    expect(parseGguf(bytes).getArray("tokenizer.ggml.tokens").toArray()).toEqual(words);
    const again = parseGguf(bytes).getArray("tokenizer.ggml.tokens");
    expect([again.at(4), again.at(4), again.at(4999)]).toEqual([words[4], words[4], words[4999]]);
    expect(again.toArray()).toEqual(words);
  });
});

describe("head(n) of parsed arrays", () => {
  it("writes the same bytes as re-setting the first n decoded items", async () => {
    const { StringArray, NumberArray } = await import("@compat/gguf/advanced");
    const words = Array.from({ length: 300 }, (_, i) => `w${i}ü`);
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, words);
    m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, words.map((_, i) => -i));
    const parsed = parseGguf(await serializeGguf(m));
    const viaHead = parsed.clone();
    const viaItems = parsed.clone();
    for (const key of ["tokenizer.ggml.tokens", "tokenizer.ggml.scores"]) {
      const arr = parsed.getArray(key);
      expect(arr instanceof StringArray || arr instanceof NumberArray).toBe(true);
      viaHead.set(key, GgufValueType.ARRAY, (arr as InstanceType<typeof StringArray>).head(257));
      viaItems.setArray(key, arr.itemType, arr.toArray().slice(0, 257) as never);
    }
    expect(await serializeGguf(viaHead)).toEqual(await serializeGguf(viaItems));
    expect(viaHead.getArray("tokenizer.ggml.tokens").toArray()).toEqual(words.slice(0, 257));
  });
});

describe("head(n) of a parsed vocabulary", () => {
  it("cuts at every n like the decoded items, from the parse's marks (the vocabulary is not indexed again)", async () => {
    const { StringArray } = await import("@compat/gguf/advanced");
    // long items (a prefix byte >= 0x80) stop the parser's fast walk: marks land after them too
    const words = Array.from({ length: 40_000 }, (_, i) => (i % 997 === 0 ? `long${"é".repeat(80)}${i}` : i % 5 === 0 ? `Ġw${i}é` : `t${i}`));
    const m = GgufModel.create();
    m.setString("general.architecture", "x");
    m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, words);
    const bytes = await serializeGguf(m);
    const cuts = [0, 1, 2, 997, 998, 4096, 12_345, 20_000, 39_999, 40_000, 50_000];
    for (const read of [async () => parseGguf(bytes), async () => readGguf(bufferSource(bytes, "steps"), { initialChunk: 4096 })]) {
      const model = await read();
      const arr = model.getArray("tokenizer.ggml.tokens") as InstanceType<typeof StringArray>;
      for (const n of cuts) {
        const head = arr.head(n);
        expect(head.length).toBe(Math.min(n, words.length));
        expect(head.toArray().join("\n") === words.slice(0, n).join("\n")).toBe(true);
      }
      // head walked from the marks: the array itself was never indexed item by item
      expect((arr.raw as unknown as { indexed: number }).indexed).toBe(0);
      const cut = model.clone();
      cut.set("tokenizer.ggml.tokens", GgufValueType.ARRAY, arr.head(12_345));
      const byItems = model.clone();
      byItems.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, words.slice(0, 12_345));
      expect(Buffer.compare(await serializeGguf(cut), await serializeGguf(byItems))).toBe(0);
    }
  });
});
