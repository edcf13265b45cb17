import { join } from "node:path";
import { GgmlType, GgufValueType, readGguf, serializeGguf, parseGguf } from "@compat/gguf";
import { clipViewModel } from "@compat/clip";
import { encodeQ8_0, generateFixture, killAllSpawned, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { expectAnswersLikeNative, greyImage, mtmdAnswer, proveClip, valuesF32 } from "../proof";
import { expectFusedQkv, expectTowerFromSource } from "../qwen-tower";

const dir = tempDir();
afterAll(() => killAllSpawned());

/** Ollama stored v.pos_embed F16; llama.cpp's converter keeps it F32: compared through F16. */
const QWEN3VL_TWIN = { roundedThrough: { "v.position_embd.weight": GgmlType.F16 } };

describe("qwen3vl clip handler (ViT, patch merger and DeepStack mergers inline)", () => {
  it("our mmproj equals llama.cpp's native qwen3vl_merger mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    const d = await dir();
    const p = await proveClip(d, "qwen3vl", { seed: 5, twin: QWEN3VL_TWIN });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen3vl-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("qwen3vl_merger");
    expect(m.getNumber("clip.vision.image_size")).toBe(64);
    expect(m.getArray("clip.vision.is_deepstack_layers").toArray()).toEqual([true, true, true]);
    // same types: the fused QKV and both patch frames stay F16, as the converter writes them
    expect(m.findTensor("v.blk.0.attn_qkv.weight")?.type).toBe(GgmlType.F16);
    expect(m.findTensor("v.patch_embd.weight.1")?.type).toBe(GgmlType.F16);
    expect(m.findTensor("v.position_embd.weight")?.type).toBe(GgmlType.F32);
    expect(m.tensors.some((t) => /attn_[qkv]\./.test(t.name) || t.name.includes("patch_embed"))).toBe(false);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    await expectTowerFromSource(m, p.ollamaPath, 3, 3);
    await m.close();

    const image = await greyImage(d, 96, 128);
    await expectAnswersLikeNative(p, d, image, "chatml");
  });

  it("mixed Q/K/V types (F16 Q/K, Q8_0 V, as in published files) merge to F32; llama-mtmd-cli runs that mmproj", async () => {
    const d = await dir();
    const model = generateFixture("qwen3vl", { seed: 6, layout: "ollama" }).text;
    const v = model.findTensor("v.blk.1.attn_v.weight")!;
    const original = await valuesF32(model, v.name);
    v.type = GgmlType.Q8_0;
    v.data = { kind: "bytes", bytes: encodeQ8_0(original) };
    const source = parseGguf(await serializeGguf(model));
    const view = clipViewModel(source)!;
    const path = join(d, "mmproj-qwen3vl-mixed.gguf");
    await view.writeTo(path);
    const m = await readGguf(path);
    expect(m.findTensor("v.blk.1.attn_qkv.weight")?.type).toBe(GgmlType.F32);
    expect(m.findTensor("v.blk.1.attn_qkv.weight")?.shape).toEqual([32, 96]);
    // the biases (all F32) and the other blocks (all F16) keep their type
    expect(m.findTensor("v.blk.1.attn_qkv.bias")?.type).toBe(GgmlType.F32);
    expect(m.findTensor("v.blk.0.attn_qkv.weight")?.type).toBe(GgmlType.F16);
    await expectFusedQkv(m, source, 3);
    expect(view.report.ops.find((o) => o.tensor === "v.blk.1.attn_qkv.weight")?.label).toBe("concat q+k+v (mixed types -> F32)");
    await m.close();
    await view.close();

    const native = await writeFixture(generateFixture("qwen3vl", { seed: 6, layout: "native" }), d);
    expect((await mtmdAnswer(native.text, path, await greyImage(d, 96, 60), "chatml")).length).toBeGreaterThan(0);
  });

  it("DeepStack merger K is named after vision layer deepstack_visual_indexes[K]", async () => {
    const model = generateFixture("qwen3vl", { seed: 7, layout: "ollama" }).text;
    model.setArray("qwen3vl.vision.deepstack_visual_indexes", GgufValueType.INT32, [2, 0, 1]);
    const view = clipViewModel(model)!;
    const m = view.model;
    expect(m.getArray("clip.vision.is_deepstack_layers").toArray()).toEqual([true, true, true]);
    for (const [k, layer] of [[0, 2], [1, 0], [2, 1]] as const) {
      for (const [from, to] of [["norm.weight", "norm.weight"], ["linear_fc1.weight", "fc1.weight"], ["linear_fc2.bias", "fc2.bias"]] as const) {
        const want = await valuesF32(model, `v.deepstack_merger.${k}.${from}`);
        expect(Array.from(await valuesF32(m, `v.deepstack.${layer}.${to}`))).toEqual(Array.from(want));
      }
    }
    expect(m.tensors.some((t) => t.name.includes("deepstack_merger"))).toBe(false);
    await view.close();

    const sparse = generateFixture("qwen3vl", { seed: 7, layout: "ollama" }).text;
    sparse.setArray("qwen3vl.vision.deepstack_visual_indexes", GgufValueType.INT32, [1, 7, -1]);
    expect(clipViewModel(sparse)!.model.getArray("clip.vision.is_deepstack_layers").toArray()).toEqual([false, true, false]);
  });

  it("leaves files with rope.dimension_sections alone, as the reference does", () => {
    const model = generateFixture("qwen3vl", { seed: 8, layout: "ollama" }).text;
    model.setArray("qwen3vl.rope.dimension_sections", GgufValueType.INT32, [24, 20, 20, 0]);
    expect(clipViewModel(model)).toBeNull();
  });
});
