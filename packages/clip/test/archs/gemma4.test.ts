import { GgmlType } from "@compat/gguf";
import { killAllSpawned, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { greyImage, mtmdAnswer, proveClip } from "../proof";

const dir = tempDir();

/**
 * clip.cpp resizes a gemma4v image to 70..1120 tokens of 3x3 patches; the toy tower's
 * position table has 16 rows per axis, so the budget is capped to 16 tokens (12x12 patches).
 */
const IMAGE_BUDGET = ["--image-min-tokens", "4", "--image-max-tokens", "16"];
afterAll(() => killAllSpawned());

describe("gemma4 clip handler (gemma4v vision tower inline)", () => {
  it.each(["moe", "moe-fused"])(
    "%s: our mmproj equals llama.cpp's native gemma4v mmproj, and llama-mtmd-cli answers an image prompt with our text GGUF and our mmproj",
    async (variant) => {
      const d = await dir();
      const p = await proveClip(d, "gemma4", { seed: 5, variant });
      expect(p.diff).toEqual(NO_DIFFERENCES);
      expect(p.view.report.handlers.map((h) => h.name)).toEqual(["gemma4-clip"]);
      const m = p.mmproj;
      expect(m.getString("general.architecture")).toBe("clip");
      expect(m.getString("clip.vision.projector_type")).toBe("gemma4v");
      expect(m.has("clip.projector_type")).toBe(false);
      expect(m.keys().every((k) => k.startsWith("general.") || k.startsWith("clip."))).toBe(true);
      expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
      // kept F16 as llama.cpp's converter writes it for --outtype f16 (the reference promotes it to F32)
      expect(m.findTensor("v.patch_embd.weight")?.type).toBe(GgmlType.F16);
      // Ollama's packed clamp copy is not an mmproj tensor; the per-linear scalars are
      expect(m.findTensor("v.clamp_data")).toBeUndefined();
      expect(m.findTensor("v.blk.0.attn_q.input_max")?.shape).toEqual([1]);
      // nothing is computed: every tensor is Ollama's bytes under the same name
      expect(p.view.report.ops).toEqual([]);
      expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
      await m.close();

      const image = await greyImage(d, 64, 128);
      const native = await writeFixture(p.native, d);
      const ours = await mtmdAnswer(p.textPath, p.mmprojPath, image, "gemma", IMAGE_BUDGET);
      expect(ours.length).toBeGreaterThan(0);
      // same text model, same tower values: our mmproj and the native one give the same answer
      const withOurs = await mtmdAnswer(native.text, p.mmprojPath, image, "gemma", IMAGE_BUDGET);
      const withNative = await mtmdAnswer(native.text, native.mmproj!, image, "gemma", IMAGE_BUDGET);
      expect(withOurs).toBe(withNative);
    },
  );
});
