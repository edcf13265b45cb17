import { parseGguf, serializeGguf } from "@compat/gguf";
import { clipArchitectures, clipHandlers, clipView, clipViewModel, hasClipHandler } from "@compat/clip";
import { allFixtureVariants, arbitraryNonOllamaGguf, generateFixture, summarized } from "@compat/testkit";
import fc from "fast-check";
import { describe, expect, it } from "vitest";

describe("the clip view is a no-op where it must be", () => {
  it("null for arbitrary non-Ollama GGUFs (synthetic, and llama.cpp-native text and mmproj files)", () => {
    fc.assert(
      fc.property(arbitraryNonOllamaGguf().map(summarized), ({ model }) => {
        expect(clipViewModel(model)).toBeNull();
        expect(hasClipHandler(model)).toBe(false);
      }),
      { numRuns: 100 },
    );
  });

  it("null from bytes too, which stay unchanged", async () => {
    await fc.assert(
      fc.asyncProperty(arbitraryNonOllamaGguf({ nativeFixtures: false }).map(summarized), async ({ model }) => {
        const bytes = await serializeGguf(model);
        const copy = bytes.slice();
        expect(await clipView(bytes)).toBeNull();
        expect(Buffer.compare(Buffer.from(bytes), Buffer.from(copy))).toBe(0);
      }),
      { numRuns: 50 },
    );
  });

  const variants = allFixtureVariants();

  it.each(variants)("native $arch/$variant (text and mmproj twin) is left alone", ({ arch, variant }) => {
    const native = generateFixture(arch, { seed: 11, layout: "native", variant });
    expect(clipViewModel(native.text)).toBeNull();
    if (native.mmproj) expect(clipViewModel(native.mmproj)).toBeNull();
  });

  it.each(variants)("ollama $arch/$variant: a view exactly for vision variants; idempotent; off with OLLAMA_LLAMA_CPP_COMPAT=0", async ({ arch, variant, vision }) => {
    const ollama = generateFixture(arch, { seed: 11, layout: "ollama", variant });
    expect(clipViewModel(ollama.text, { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } })).toBeNull();
    expect(await clipView(ollama.text, { env: { OLLAMA_LLAMA_CPP_COMPAT: "0" } })).toBeNull();
    const view = clipViewModel(ollama.text);
    expect(hasClipHandler(ollama.text)).toBe(view !== null);
    // every vision fixture of an arch with a clip handler gets a view; text-only ones never do
    expect(view !== null).toBe(vision && clipArchitectures.has(arch));
    if (view === null) return;
    expect(view.model.getString("general.architecture")).toBe("clip");
    const again = parseGguf(await serializeGguf(view.model));
    expect(clipViewModel(again)).toBeNull();
  });
});

describe("the clip registry", () => {
  it("lists the architectures with a tower handler, once each; only the LLaVA default is gated on clip", () => {
    expect([...clipArchitectures].sort()).toEqual(["deepseekocr", "gemma3", "gemma4", "glmocr", "llama4", "mistral3", "nemotron_h_omni", "qwen25vl", "qwen35", "qwen35moe", "qwen3vl", "qwen3vlmoe"]);
    const gatedOnClip = clipHandlers.filter((h) => h.arch === "clip" || (Array.isArray(h.arch) && h.arch.includes("clip")));
    expect(gatedOnClip.map((h) => h.name)).toEqual(["llava-projector-type"]);
    expect(clipHandlers[0]!.name).toBe("llava-projector-type");
  });
});
