import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { parseGguf, serializeGguf } from "@compat/gguf";
import { allFixtureVariants, arbitraryNativeFixtureGguf, arbitraryNonOllamaGguf, arbitrarySyntheticGguf, OLLAMA_HANDLED_ARCHS } from "@compat/testkit";

describe("arbitraryNonOllamaGguf", () => {
  it("synthetic models are valid GGUFs that round-trip and never use an Ollama-handled arch or tower prefix", async () => {
    await fc.assert(
      fc.asyncProperty(arbitrarySyntheticGguf({ bigEndian: true }), async (m) => {
        const arch = m.getString("general.architecture");
        expect(OLLAMA_HANDLED_ARCHS.has(arch)).toBe(false);
        expect(m.tensors.some((t) => /^(v|mm|a|s)\./.test(t.name))).toBe(false);
        const back = parseGguf(await serializeGguf(m));
        expect(back.keys()).toEqual(m.keys());
        expect(back.tensors.map((t) => t.name)).toEqual(m.tensors.map((t) => t.name));
      }),
      { numRuns: 60 },
    );
  });

  it("native fixtures come out as llama.cpp-layout models (text and clip mmproj)", () => {
    const seen = new Set<string>();
    fc.assert(
      fc.property(arbitraryNativeFixtureGguf([1]), (m) => {
        const arch = m.getString("general.architecture");
        seen.add(arch);
        expect(m.getString("general.type")).toMatch(/^(model|mmproj)$/);
      }),
      // enough draws to meet every arch: the parts are uniform over variants, gemma4 alone has six
      { numRuns: 300, seed: 1 },
    );
    // (a registry arch may be written under another general.architecture natively, e.g. gptoss → gpt-oss)
    expect([...seen]).toEqual(expect.arrayContaining(["llama", "gemma3", "qwen3next", "clip"]));
    expect(seen.size).toBeGreaterThanOrEqual(new Set(allFixtureVariants().map((v) => v.arch)).size);
  });

  it("mixes both sources by default", () => {
    const samples = fc.sample(arbitraryNonOllamaGguf({ fixtureSeeds: [1] }), { numRuns: 40, seed: 42 });
    const native = samples.filter((m) => m.has("general.type"));
    expect(native.length).toBeGreaterThan(0);
    expect(native.length).toBeLessThan(samples.length);
  });
});
