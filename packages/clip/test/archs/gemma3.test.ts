import { GgmlType, PADDING_KEY } from "@compat/gguf";
import { killAllSpawned, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { greyImage, mtmdAnswer, proveClip } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

describe("gemma3 clip handler (SigLIP tower and gemma3 projector inline)", () => {
  it("our mmproj equals llama.cpp's native mmproj, and llama-mtmd-cli answers an image prompt with our text GGUF and our mmproj", async () => {
    const d = await dir();
    const p = await proveClip(d, "gemma3", {
      seed: 5,
      variant: "4b-vision",
      twin: {
        // Ollama stored these two F16 where llama.cpp's converter forces F32: promoted back to
        // F32, they hold the native values rounded through F16, and nothing better exists in the file
        roundedThrough: { "v.patch_embd.weight": GgmlType.F16, "v.position_embd.weight": GgmlType.F16 },
      },
    });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["gemma3-clip"]);
    const m = p.mmproj;
    expect(m.getString("general.architecture")).toBe("clip");
    expect(m.getString("clip.projector_type")).toBe("gemma3");
    expect(m.keys().every((k) => k.startsWith("general.") || k.startsWith("clip.") || k === PADDING_KEY)).toBe(true);
    expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
    // fc1 is ffn_up as llama.cpp's converter names it, not the legacy swapped name the reference uses
    expect(m.findTensor("v.blk.0.ffn_up.weight")?.shape).toEqual([48, 96]);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    await m.close();

    const native = await writeFixture(p.native, d);
    const answers: string[] = [];
    for (const level of [128, 30]) {
      const image = await greyImage(d, 64, level);
      expect((await mtmdAnswer(p.textPath, p.mmprojPath, image, "gemma")).length).toBeGreaterThan(0);
      // With the native text model, our mmproj answers as the native one does (its two promoted
      // tensors differ from native only by F16 rounding). Our text GGUF differs in tokenizer
      // metadata (see the text handler's test), so its answer is not compared.
      const withOurs = await mtmdAnswer(native.text, p.mmprojPath, image, "gemma");
      expect(withOurs).toBe(await mtmdAnswer(native.text, native.mmproj!, image, "gemma"));
      answers.push(withOurs);
    }
    // the image reaches the model: two grey levels, two answers
    expect(answers[0]).not.toBe(answers[1]);
  });
});
