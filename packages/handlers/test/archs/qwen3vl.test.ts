import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GgufModel, GgufValueType } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { killAllSpawned } from "@compat/testkit";
import { addF32, tempDir } from "../helpers";
import { expectServerAnswersLikeTwin, expectTwinTokens, NO_DIFFERENCES, proveHandler, QWEN_UNUSED_BOS_KEYS } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

const twin = { ignoreKeys: [...QWEN_UNUSED_BOS_KEYS] };

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
    expectTwinTokens(p);

    await expectServerAnswersLikeTwin(p);
  });

  it("bf16 source: the same, with BF16 text weights", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 6, sourceDtype: "bf16", nativeTwin: true, twin });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expectTwinTokens(p);
  });

  it("head_dim 64: the hard-coded sections differ from the config's [12, 10, 10, 0] yet load; text-only tokens still match", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 5, variant: "head64", nativeTwin: true, twin, profile: "reference" });
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["qwen3vl-rope-sections"]);
    expect(p.translatedModel.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([24, 20, 20, 0]);
    expect(p.native.text.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([12, 10, 10, 0]);
    // reference gap: only the sections differ
    expect(p.diff).toEqual({ ...NO_DIFFERENCES, kv: [expect.stringMatching(/^qwen3vl\.rope\.dimension_sections: /)] });
    // with text only, the time/height/width positions are equal, so the split does not change the rotation
    expectTwinTokens(p);
  });

  it("head_dim 32: the reference's 64 section dims exceed the head, and llama.cpp aborts where the native twin runs", async () => {
    const p = await proveHandler(await dir(), "qwen3vl", { seed: 5, variant: "head32", nativeTwin: true, twin, profile: "reference" });
    expect(p.translatedModel.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([24, 20, 20, 0]);
    expect(p.load.ok).toBe(false);
    expect(p.load.ok ? "" : p.load.error).toMatch(/GGML_ASSERT\(sect_dims <= ne0\)/);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
  });

  it.each([
    ["head32", [6, 5, 5, 0]],
    ["head64", [12, 10, 10, 0]],
  ] as const)("native profile (qwen3vl-rope-sections), %s: sections from the head size; exactly the native twin, loads and generates its greedy tokens", async (variant, want) => {
    const p = await proveHandler(join(await dir(), "native-profile"), "qwen3vl", { seed: 5, variant, nativeTwin: true, twin });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["qwen3vl", "qwen3vl-rope-sections"]]);
    const sections = p.translatedModel.getArray("qwen3vl.rope.dimension_sections");
    expect(sections.itemType).toBe(GgufValueType.INT32);
    expect(sections.toArray()).toEqual([...want]);
    expect(p.native.text.getArray("qwen3vl.rope.dimension_sections").toArray()).toEqual([...want]);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
    if (variant === "head32") {
      // llama-server too: the native output answers like the twin where the reference output aborts (test above)
      await expectServerAnswersLikeTwin(p);
    }
  });
});

describe("qwen3vl handler: the reference's conditions, on small synthetic models", () => {
  function model(arch: string, edit: (m: GgufModel) => void = () => {}): GgufModel {
    const m = GgufModel.create();
    m.setString("general.architecture", arch);
    edit(m);
    addF32(m, "token_embd.weight", [4, 4]);
    return m;
  }

  it("leaves a file that has rope.dimension_sections alone (llama.cpp's converter always writes it)", () => {
    expect(translateModel(model("qwen3vl", (m) => m.setArray("qwen3vl.rope.dimension_sections", GgufValueType.INT32, [8, 4, 4, 0])))).toBeNull();
  });

  it("without deepstack indexes injects 0, and keeps an existing n_deepstack_layers", () => {
    const none = translateModel(model("qwen3vlmoe"), { profile: "reference" })!.model;
    expect(none.getArray("qwen3vlmoe.rope.dimension_sections").toArray()).toEqual([24, 20, 20, 0]);
    expect(none.getU32("qwen3vlmoe.n_deepstack_layers")).toBe(0);
    const kept = translateModel(
      model("qwen3vl", (m) => {
        m.setArray("qwen3vl.vision.deepstack_visual_indexes", GgufValueType.INT32, [8, 16, 24]);
        m.setU32("qwen3vl.n_deepstack_layers", 2);
      }),
    )!.model;
    expect(kept.getU32("qwen3vl.n_deepstack_layers")).toBe(2);
  });

  it("native derives the sections: the file's own mrope_section first, else key_length, else the q_norm width; reference keeps [24, 20, 20, 0]", () => {
    const sections = (edit: (m: GgufModel) => void, arch = "qwen3vl", profile: "native" | "reference" = "native") =>
      translateModel(model(arch, edit), { profile })!.model.getArray(`${arch}.rope.dimension_sections`).toArray();
    expect(sections((m) => m.setU32("qwen3vl.attention.key_length", 256))).toEqual([48, 40, 40, 0]);
    expect(sections((m) => m.setU32("qwen3vlmoe.attention.key_length", 128), "qwen3vlmoe")).toEqual([24, 20, 20, 0]);
    expect(sections((m) => addF32(m, "blk.0.attn_q_norm.weight", [32]))).toEqual([6, 5, 5, 0]);
    const own = (m: GgufModel) => {
      m.setU32("qwen3vl.attention.key_length", 32);
      m.setArray("qwen3vl.rope.mrope_section", GgufValueType.INT32, [4, 2, 2]);
    };
    expect(sections(own)).toEqual([4, 2, 2, 0]);
    expect(sections(own, "qwen3vl", "reference")).toEqual([24, 20, 20, 0]);
    const moe = translateModel(model("qwen3vlmoe", (m) => m.setU32("qwen3vlmoe.attention.key_length", 64)))!;
    expect(moe.report.fixes.map((f) => f.name)).toEqual(["qwen3vlmoe-rope-sections"]);
    // head_dim 128 needs nothing: the reference's value is already right
    expect(translateModel(model("qwen3vl", (m) => m.setU32("qwen3vl.attention.key_length", 128)))!.report.fixes).toEqual([]);
  });
});
