import { describe, expect, it } from "vitest";
import { GgufValueType } from "@compat/gguf";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

const twin = {
  ignoreKeys: [
    // unused: for the qwen2 pre-tokenizer llama.cpp adds no BOS, which is what the native file states
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.add_bos_token",
  ],
};

describe("qwen3vl handler (Qwen3-VL dense as Ollama converted it: no M-RoPE sections, vision tower inline)", () => {
  it("head_dim 128: injects [24, 20, 20, 0] and the DeepStack count; exactly the native twin, same greedy tokens in llama.cpp", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 5, nativeTwin: true, twin });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen3vl"]);
    const m = p.translatedModel;
    const sections = m.getArray("qwen3vl.rope.dimension_sections");
    expect(sections.itemType).toBe(GgufValueType.INT32);
    expect(sections.toArray()).toEqual([24, 20, 20, 0]);
    expect(m.get("qwen3vl.n_deepstack_layers")).toEqual({ key: "qwen3vl.n_deepstack_layers", type: GgufValueType.UINT32, value: 3 });
    expect(m.tensors.some((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
  });

  it("bf16 source: the same, with BF16 text weights", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 6, sourceDtype: "bf16", nativeTwin: true, twin });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
  });

  it("head_dim 64: the hard-coded sections differ from the config's [12, 10, 10, 0] yet load; text-only tokens still match", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 5, variant: "head64", nativeTwin: true, twin });
    expect(p.translatedModel.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([24, 20, 20, 0]);
    expect(p.native.text.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([12, 10, 10, 0]);
    // reference gap: only the sections differ
    expect(p.diff).toEqual({ ...NO_DIFFERENCES, kv: [expect.stringMatching(/^qwen3vl\.rope\.dimension_sections: /)] });
    // with text only, the time/height/width positions are equal, so the split does not change the rotation
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
  });

  it("head_dim 32: the reference's 64 section dims exceed the head, and llama.cpp aborts where the native twin runs", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 5, variant: "head32", nativeTwin: true, twin });
    expect(p.translatedModel.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([24, 20, 20, 0]);
    expect(p.load.ok).toBe(false);
    expect(p.load.ok ? "" : p.load.error).toMatch(/GGML_ASSERT\(sect_dims <= ne0\)/);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
  });
});
