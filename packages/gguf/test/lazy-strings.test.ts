// Parsed string arrays decode on demand: item reads before and after the switch from the
// small per-item cache to the packed one give the same strings as a full decode.
import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType, parseGguf, serializeGguf } from "@compat/gguf";

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
