import { GgmlType, PADDING_KEY } from "@compat/gguf";
import { killAllSpawned } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { expectAnswersLikeNative, greyImage, proveClip } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("glmocr clip handler (GLM-4V-style tower and glm4v merger inline)", () => {
  it("our mmproj equals llama.cpp's native glm4v mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    const d = await dir();
    const p = await proveClip(d, "glmocr", { seed: 3 });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["glmocr-clip"]);
    const m = p.mmproj;
    expect(m.getString("general.architecture")).toBe("clip");
    expect(m.getString("clip.projector_type")).toBe("glm4v");
    expect(m.getBool("clip.use_silu")).toBe(true);
    // kept from Ollama's file (the native converter leaves it to clip.cpp's default of 2)
    expect(m.getNumber("clip.vision.spatial_merge_size")).toBe(2);
    // the two time halves of the patch convolution, under llama.cpp's names and kept F16 as its
    // converter writes them (the reference promotes both to F32)
    for (const name of ["v.patch_embd.weight", "v.patch_embd.weight.1"]) {
      expect(m.findTensor(name)?.type, name).toBe(GgmlType.F16);
      expect(m.findTensor(name)?.shape, name).toEqual([14, 14, 3, 32]);
    }
    expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
    expect(m.keys().every((k) => k.startsWith("general.") || k.startsWith("clip.") || k === PADDING_KEY)).toBe(true);
    expect(p.view.report.ops).toEqual([]);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    await m.close();

    // glm4v needs both sides a multiple of 2 patches (28 px) and at least 8 merged tokens
    const image = await greyImage(d, 112, 128);
    await expectAnswersLikeNative(p, d, image, "chatglm4");
  });
});
