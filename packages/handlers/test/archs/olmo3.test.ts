import { describe, expect, it } from "vitest";
import { GgufValueType } from "@compat/gguf";
import { tempDir } from "../helpers";
import { COMPUTES_DIFFERENTLY, distributionDistance, NO_DIFFERENCES, SAME_COMPUTATION, proveHandler } from "../proof";

const dir = tempDir();
let referenceOut: string | undefined;

const twin = {
  ignoreKeys: [
    // Ollama's tokenizer reader did not know OLMo 3's split regex and wrote "default"; the
    // reference keeps it (llama.cpp accepts it and uses its default BPE split instead of dbrx's)
    "tokenizer.ggml.pre",
    // llama.cpp's olmo2 loader never reads the yarn_* keys (only grok and mistral3 do); it
    // derives the YaRN attention scale from the factor and uses its default betas (32, 1)
    "olmo2.rope.scaling.yarn_attn_factor",
    "olmo2.rope.scaling.yarn_beta_fast",
    "olmo2.rope.scaling.yarn_beta_slow",
  ],
};

describe("olmo3 handler (OLMo 3 as Ollama converted it, arch olmo3)", () => {
  it("reference profile: renames the arch to olmo2; real llama.cpp loads and generates; matches the native twin's keys", async () => {
    const p = await proveHandler(await dir(), "olmo3", { seed: 5, twin, profile: "reference" });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["olmo3"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["olmo3-yarn-attn-factor-once"]);
    const m = p.translatedModel;
    expect(m.getString("general.architecture")).toBe("olmo2");
    // the prefix is copied, not moved: every olmo3.* key stays next to its olmo2.* twin
    const keys = m.kvs().map((kv) => kv.key);
    const olmo3Keys = keys.filter((k) => k.startsWith("olmo3."));
    expect(olmo3Keys.length).toBeGreaterThan(10);
    for (const k of olmo3Keys) expect(keys).toContain(k.replace(/^olmo3\./, "olmo2."));
    expect(m.getU32("olmo2.attention.sliding_window")).toBe(4096);
    expect(m.getArray("olmo2.attention.sliding_window_pattern").itemType).toBe(GgufValueType.BOOL);
    // Ollama's attn_factor comes along under the new prefix, like in the reference. llama.cpp does
    // read this one (hparams.rope_attn_factor) and multiplies it into the YaRN scale it already
    // derives from the factor, so the translated model's logits differ from the native twin's
    // (which has no such key): a reference gap, kept by this profile (the native one fixes it)
    expect(m.get("olmo2.rope.scaling.attn_factor")?.type).toBe(GgufValueType.FLOAT32);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    referenceOut = p.outPath;
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("native profile (olmo3-yarn-attn-factor-once): greedy tokens equal the native twin's in real llama.cpp; the reference's scores differ", async () => {
    const p = await proveHandler(await dir(), "olmo3", { seed: 5, twin, nativeTwin: true });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["olmo3", "olmo3-yarn-attn-factor-once"]]);
    expect(p.translatedModel.has("olmo2.rope.scaling.attn_factor")).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    // the native twin (olmo2) loads, generates, and is left alone by translate() (proveNativeTwin)
    const twinLoad = p.twin!.load!;
    expect(twinLoad.ok ? twinLoad.tokens.length : twinLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(twinLoad.ok ? twinLoad.tokens : []);
    // over 8 steps the output scores every next token as the twin does; the reference's doubled
    // YaRN scale changes what the model computes, not only a near-tie between greedy tokens
    expect(await distributionDistance(p.outPath, p.twin!.paths.text, 8)).toBeLessThan(SAME_COMPUTATION);
    expect(await distributionDistance(referenceOut!, p.twin!.paths.text, 8)).toBeGreaterThan(COMPUTES_DIFFERENTLY);
  });
});
