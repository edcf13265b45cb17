import { GgmlType, GgufValueType } from "@compat/gguf";
import { clipViewModel } from "@compat/clip";
import { generateFixture, killAllSpawned, runMtmdCli } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { expectAnswersLikeNative, greyImage, proveClip } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("qwen25vl clip handler (windowed ViT and patch merger inline)", () => {
  it("our mmproj equals llama.cpp's native qwen2.5vl_merger mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    const d = await dir();
    const p = await proveClip(d, "qwen25vl", { seed: 5 });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen25vl-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("qwen2.5vl_merger");
    // the first full-attention block is 1: windows of 2 blocks
    expect(m.getNumber("clip.vision.n_wa_pattern")).toBe(2);
    expect(m.getNumber("clip.vision.feed_forward_length")).toBe(64);
    // kept F16 as llama.cpp's converter writes them (the reference promotes both to F32)
    expect(m.findTensor("v.patch_embd.weight")?.type).toBe(GgmlType.F16);
    expect(m.findTensor("v.patch_embd.weight.1")?.type).toBe(GgmlType.F16);
    expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
    expect(p.view.report.ops).toEqual([]);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    await m.close();

    const image = await greyImage(d, 56, 128);
    const native = await expectAnswersLikeNative(p, d, image, "chatml");
    // stock llama.cpp cannot use the Ollama blob itself as the mmproj
    const stock = await runMtmdCli({ model: native.text, mmproj: p.ollamaPath, image, prompt: "Describe.", args: ["--chat-template", "chatml"] });
    expect(stock.ok).toBe(false);
  });

  it("n_wa_pattern: first full-attention block + 1, else the reference's 8; image_size 560 and window_size carried", () => {
    const m = generateFixture("qwen25vl", { seed: 3, layout: "ollama" }).text;
    m.setArray("qwen25vl.vision.fullatt_block_indexes", GgufValueType.INT32, [3, 7]);
    expect(clipViewModel(m)!.model.getNumber("clip.vision.n_wa_pattern")).toBe(4);
    m.delete("qwen25vl.vision.fullatt_block_indexes");
    const view = clipViewModel(m)!.model;
    expect(view.getNumber("clip.vision.n_wa_pattern")).toBe(8);
    expect(view.getNumber("clip.vision.image_size")).toBe(560);
    expect(view.getNumber("clip.vision.window_size")).toBe(112);
  });
});
