import { parseGguf, serializeGguf } from "@compat/gguf";
import { translate, translateModel } from "@compat/handlers";
import { allFixtureVariants, arbitraryNonOllamaGguf, generateFixture, summarized } from "@compat/testkit";
import fc from "fast-check";
import { describe, expect, it } from "vitest";

describe("translation is a no-op where it must be", () => {
  it("returns null for arbitrary non-Ollama GGUFs (synthetic and llama.cpp-native)", () => {
    fc.assert(
      fc.property(arbitraryNonOllamaGguf().map(summarized), ({ model }) => {
        expect(translateModel(model)).toBeNull();
      }),
      { numRuns: 80 },
    );
  });

  it("returns null from bytes too, and never alters them", async () => {
    await fc.assert(
      fc.asyncProperty(arbitraryNonOllamaGguf({ nativeFixtures: false }).map(summarized), async ({ model }) => {
        const bytes = await serializeGguf(model);
        const copy = bytes.slice();
        expect(await translate(bytes)).toBeNull();
        expect(Buffer.compare(Buffer.from(bytes), Buffer.from(copy))).toBe(0);
      }),
      { numRuns: 60 },
    );
  });

  const variants = allFixtureVariants();

  it.each(variants)("native $arch/$variant is left alone", ({ arch, variant }) => {
    const native = generateFixture(arch, { seed: 11, layout: "native", variant });
    expect(translateModel(native.text)).toBeNull();
    if (native.mmproj) expect(translateModel(native.mmproj)).toBeNull();
  });

  it.each(variants)("ollama $arch/$variant: translated once, then a no-op; disabled by OLLAMA_LLAMA_CPP_COMPAT=0", async ({ arch, variant }) => {
    const ollama = generateFixture(arch, { seed: 11, layout: "ollama", variant });
    expect(translateModel(ollama.text, { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } })).toBeNull();
    const view = translateModel(ollama.text);
    if (view === null) return; // a variant llama.cpp loads as it is (e.g. a plain Llama 3 file)
    const again = parseGguf(await serializeGguf(view.model));
    expect(translateModel(again)).toBeNull();
  });
});
