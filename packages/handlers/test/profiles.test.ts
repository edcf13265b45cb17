import { GgufModel, parseGguf, serializeGguf } from "@compat/gguf";
import { formatReport, translate, translateModel, TranslationError, type TranslationProfile } from "@compat/handlers";
import { allFixtureVariants, arbitraryNonOllamaGguf, generateFixture, summarized } from "@compat/testkit";
import fc from "fast-check";
import { describe, expect, it } from "vitest";

const PROFILES: TranslationProfile[] = ["native", "reference"];

/** The fixes each handler offers on its Ollama fixtures (the native profile's corrections of reference gaps). */
const EXPECTED_FIXES: Record<string, string[]> = {
  "gemma3/1b": ["gemma3-add-space-prefix"],
  "gemma3/4b-vision": ["gemma3-add-space-prefix"],
  "embeddinggemma/300m": ["embeddinggemma-add-space-prefix"],
  "olmo3/7b-instruct": ["olmo3-yarn-attn-factor-once"],
  "laguna/xs2": ["laguna-assistant-turn-end"],
  "llama4/maverick": ["llama4-pre-tokenizer", "llama4-add-bos"],
  "llama/llama3-metadata-gap": ["llama3-add-bos"],
  // the reference passes this one through untouched; native still fixes its BOS flag
  "llama/llama3": ["llama3-add-bos"],
  "gemma3n/e2b": ["gemma3n-rope-freq-base-swa", "gemma3n-add-space-prefix"],
  "glmocr/default": ["glmocr-user-turn-end"],
  "glmocr/q8_0": ["glmocr-user-turn-end"],
  "glmocr/mixed": ["glmocr-ffn-gate-up-mixed-types-f32", "glmocr-user-turn-end"],
  "glmocr/mixed-bf16": ["glmocr-ffn-gate-up-mixed-types-f32", "glmocr-user-turn-end"],
  // head_dim 128 needs no fix: the reference's hard-coded sections are Qwen3-VL's own for it
  "qwen3vl/head64": ["qwen3vl-rope-sections"],
  "qwen3vl/head32": ["qwen3vl-rope-sections"],
  // the dense Nemotron-H only: llama.cpp's converter leaves the MoE's BOS flag to the config
  "nemotron_h_omni/vl": ["nemotron_h_omni-add-bos"],
  // the -text variants carry no MTP layer
  "qwen35/9b": ["qwen35-mtp-norms-once"],
  "qwen35/9b-q8_0": ["qwen35-mtp-norms-once"],
  "qwen35/9b-small-tower": ["qwen35-mtp-norms-once"],
  "qwen35moe/35b-a3b": ["qwen35moe-mtp-norms-once"],
  "qwen35moe/35b-a3b-q8_0": ["qwen35moe-mtp-norms-once"],
  "qwen35moe/35b-a3b-small-tower": ["qwen35moe-mtp-norms-once"],
  "qwen35moe/35b-a3b-mixed": ["qwen35moe-mtp-norms-once", "qwen35moe-mtp-mixed-experts-f32"],
  ...Object.fromEntries(["dense", "moe", "moe-fused", "moe-sidecars", "moe-q8", "moe-mixed"].map((v) => [`gemma4/${v}`, ["gemma4-token-types"]])),
};

/**
 * Reference outputs a later native run still recognizes, and so fixes. The others are
 * no longer claimed by their handler once translated (olmo3 and embeddinggemma renamed
 * the architecture, llama4's markers were the hidden vision tensors), so they keep
 * the reference's gaps: translate the
 * Ollama original with `native` instead.
 */
const REFIXED_AFTER_REFERENCE = new Set(["gemma3/1b", "gemma3/4b-vision", "laguna/xs2", "llama/llama3-metadata-gap"]);

/** Fixes that change tensors, not only metadata (every other fix leaves the tensors as the reference writes them). */
const TENSOR_FIXES = new Set(["glmocr-ffn-gate-up-mixed-types-f32", "qwen35moe-mtp-mixed-experts-f32"]);

/**
 * Inputs the reference profile refuses with a typed error: the reference's own transform
 * fails on them and llama.cpp would then load wrong weights (glmocr's Q8_0 + F16 gate/up).
 */
const REFERENCE_REFUSES: Record<string, string> = { "glmocr/mixed": "MIXED_TYPES" };

const roundTrip = async (m: GgufModel) => parseGguf(await serializeGguf(m));

describe("translation profiles", () => {
  const variants = allFixtureVariants();

  it("native is the default; an unknown profile is a typed error", async () => {
    const ollama = generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "1b" });
    expect(translateModel(ollama.text)!.report.profile).toBe("native");
    expect(() => translateModel(ollama.text, { profile: "exact" as TranslationProfile })).toThrow(TranslationError);
    await expect(translate(await serializeGguf(ollama.text), { profile: "exact" as TranslationProfile })).rejects.toMatchObject({ code: "UNKNOWN_PROFILE" });
  });

  it.each(variants)("ollama $arch/$variant: native fixes exactly the listed gaps, reference keeps them", async ({ arch, variant }) => {
    const ollama = generateFixture(arch, { seed: 11, layout: "ollama", variant });
    const native = translateModel(ollama.text, { profile: "native" });
    const want = EXPECTED_FIXES[`${arch}/${variant}`] ?? [];
    const refused = REFERENCE_REFUSES[`${arch}/${variant}`];
    if (refused !== undefined) {
      expect(() => translateModel(ollama.text, { profile: "reference" })).toThrow(expect.objectContaining({ code: refused }));
      expect(native?.report.fixes.map((f) => f.name)).toEqual(want);
      return;
    }
    const reference = translateModel(ollama.text, { profile: "reference" });
    if (reference === null) {
      // a file the reference leaves as it is: native only applies its fixes, if any
      expect(native?.report.fixes.map((f) => f.name) ?? []).toEqual(want);
      if (native !== null) {
        expect(native.report.kv.added.length + native.report.kv.removed.length).toBe(0);
        expect(native.report.tensors).toEqual({ renamed: [], retyped: [], reshaped: [], hidden: [], dropped: [], added: [] });
        // under reference the same handler only lists what it keeps
        expect(translateModel(ollama.text, { profile: "reference" })).toBeNull();
      }
      return;
    }
    if (native === null) throw new Error("native returned null where reference translated");
    expect(native.report.fixes.map((f) => f.name)).toEqual(want);
    expect(reference.report.fixes).toEqual([]);
    expect(reference.report.gapsKept).toEqual(native.report.fixes);
    for (const f of native.report.fixes) {
      expect(f.handler).toBe(native.report.handlers.find((h) => f.name.startsWith(h.name.split("-")[0]!))?.name);
      expect(f.reason.length).toBeGreaterThan(40);
      expect(formatReport(native.report)).toContain(f.name);
    }
    const nativeBytes = Buffer.from(await serializeGguf(native.model));
    const referenceBytes = Buffer.from(await serializeGguf(reference.model));
    if (want.length === 0) {
      // no known gap: both profiles write the same file
      expect(nativeBytes.equals(referenceBytes)).toBe(true);
    } else if (!want.some((f) => TENSOR_FIXES.has(f))) {
      expect(nativeBytes.equals(referenceBytes)).toBe(false);
      // the fixes only touch metadata: same tensors, same bytes
      expect(native.model.tensors.map((t) => [t.name, t.type, t.shape.join("x")])).toEqual(
        reference.model.tensors.map((t) => [t.name, t.type, t.shape.join("x")]),
      );
    } else {
      expect(nativeBytes.equals(referenceBytes)).toBe(false);
    }
  });

  it.each(variants)("ollama $arch/$variant: each profile's output is a no-op for that profile, and for reference after native", async ({ arch, variant }) => {
    const ollama = generateFixture(arch, { seed: 11, layout: "ollama", variant });
    for (const profile of PROFILES) {
      if (profile === "reference" && `${arch}/${variant}` in REFERENCE_REFUSES) continue;
      const view = translateModel(ollama.text, { profile });
      if (view === null) continue;
      expect(translateModel(await roundTrip(view.model), { profile }), `${profile} twice`).toBeNull();
    }
    // reference never undoes a fix: a natively translated file is left alone by it too
    const native = translateModel(ollama.text, { profile: "native" });
    if (native !== null) expect(translateModel(await roundTrip(native.model), { profile: "reference" })).toBeNull();
  });

  it.each(variants)("ollama $arch/$variant: native on a reference output adds exactly the fixes where the handler still sees it", async ({ arch, variant }) => {
    if (`${arch}/${variant}` in REFERENCE_REFUSES) return;
    const ollama = generateFixture(arch, { seed: 11, layout: "ollama", variant });
    const reference = translateModel(ollama.text, { profile: "reference" });
    const direct = translateModel(ollama.text, { profile: "native" });
    if (reference === null || direct === null) return;
    const again = translateModel(await roundTrip(reference.model), { profile: "native" });
    const refixed = REFIXED_AFTER_REFERENCE.has(`${arch}/${variant}`);
    expect(again !== null, "native run on the reference output").toBe(refixed);
    if (again === null) return;
    expect(again.report.fixes).toEqual(direct.report.fixes);
    // and the result is the file a direct native translation writes
    expect(Buffer.from(await serializeGguf(again.model)).equals(Buffer.from(await serializeGguf(direct.model)))).toBe(true);
  });

  it("both profiles return null for arbitrary non-Ollama GGUFs (synthetic and llama.cpp-native)", () => {
    fc.assert(
      fc.property(arbitraryNonOllamaGguf().map(summarized), fc.constantFrom(...PROFILES), ({ model }, profile) => {
        expect(translateModel(model, { profile })).toBeNull();
      }),
      { numRuns: 80 },
    );
  });

  it("fast-check: any profile sequence over Ollama fixtures (any seed) settles after one pass per profile", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...variants.filter(({ arch, variant }) => !(`${arch}/${variant}` in REFERENCE_REFUSES))),
        fc.integer({ min: 0, max: 10_000 }),
        fc.array(fc.constantFrom(...PROFILES), { minLength: 1, maxLength: 3 }),
        async ({ arch, variant }, seed, sequence) => {
          let model = generateFixture(arch, { seed, layout: "ollama", variant }).text;
          for (const profile of sequence) {
            const view = translateModel(model, { profile });
            if (view !== null) model = await roundTrip(view.model);
            // idempotent: the same profile right away finds nothing to do
            expect(translateModel(model, { profile })).toBeNull();
          }
          // native last means every fix a handler can still see is in
          const final = translateModel(model, { profile: "native" });
          if (final !== null) expect(final.report.fixes.length).toBeGreaterThan(0);
        },
      ),
      { numRuns: 40 },
    );
  });

  it("both profiles leave every native fixture alone", () => {
    for (const { arch, variant } of variants) {
      const native = generateFixture(arch, { seed: 11, layout: "native", variant });
      for (const profile of PROFILES) expect(translateModel(native.text, { profile }), `${arch}/${variant} ${profile}`).toBeNull();
    }
  });
});
