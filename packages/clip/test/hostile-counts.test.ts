// Block counts in a hostile header must not size allocations or loops, on the clip side
// as on the text side. Found by `npm run fuzz` (seed 4, input 43308: qwen3vlmoe with
// qwen3vlmoe.vision.block_count = 2^32-1 made the clip handler build a four-billion-entry
// is_deepstack_layers mask; the fuzzing process ran out of memory). Every vision fixture,
// every *block_count key set to 2^31 and 2^32-1: a view or a typed error, under both profiles.
import { GgufValueType, parseGguf, serializeGguf } from "@compat/gguf";
import { TRANSLATION_PROFILES, TranslationError, translateModel } from "@compat/handlers";
import { clipHandlers } from "@compat/clip";
import { allFixtureVariants, generateFixture } from "@compat/testkit";
import { describe, expect, it } from "vitest";

const isTyped = (e: unknown) => e instanceof Error && typeof (e as { code?: unknown }).code === "string" && e.constructor !== Error;

describe("hostile block counts on the clip side", () => {
  for (const { arch, variant } of allFixtureVariants().filter((v) => v.vision)) {
    it(`${arch}/${variant}: every *block_count at 2^31 and 2^32-1 gives a view or a typed error`, async () => {
      const bytes = await serializeGguf(generateFixture(arch, { seed: 1, layout: "ollama", variant }).text);
      const keys = parseGguf(bytes, "f.gguf", { fileSize: bytes.length })
        .kvs()
        .filter((kv) => kv.key.endsWith("block_count") && kv.type === GgufValueType.UINT32)
        .map((kv) => kv.key);
      expect(keys.length).toBeGreaterThan(0);
      for (const key of keys) {
        for (const huge of [2 ** 31, 2 ** 32 - 1]) {
          for (const profile of TRANSLATION_PROFILES) {
            for (const handlers of [clipHandlers, undefined]) {
              const m = parseGguf(bytes, "hostile.gguf", { fileSize: bytes.length });
              m.setU32(key, huge);
              try {
                const view = translateModel(m, { profile, ...(handlers ? { handlers } : {}) });
                if (view) expect(view.size).toBeGreaterThan(0);
              } catch (e) {
                expect(isTyped(e), `${key}=${huge} ${profile} ${handlers ? "clip" : "text"}: ${String(e)}`).toBe(true);
              }
            }
          }
        }
      }
    });
  }

  it("mistral3: an embedding_length that disagrees with the text embedding is BAD_COUNT, not an 8 GiB [IMG_BREAK] row (fuzz seed 5, input 173378)", () => {
    for (const variant of ["small-3.1", "ministral3"]) {
      const m = generateFixture("mistral3", { seed: 1, layout: "ollama", variant }).text;
      m.setU32("mistral3.embedding_length", 2 ** 31 - 1);
      expect(() => translateModel(m, { handlers: clipHandlers })).toThrow(/mistral3\.embedding_length is 2147483647 but the text embedding is \d+ wide/);
    }
  });

  it("qwen3vlmoe: a vision.block_count past the tower's blocks is BAD_COUNT, naming the key", async () => {
    const m = generateFixture("qwen3vlmoe", { seed: 1, layout: "ollama", variant: "30b-a3b" }).text;
    m.setU32("qwen3vlmoe.vision.block_count", 2 ** 32 - 1);
    expect(() => translateModel(m, { handlers: clipHandlers })).toThrow(TranslationError);
    expect(() => translateModel(m, { handlers: clipHandlers })).toThrow(/clip\.vision\.block_count is 4294967295/);
  });
});
