import { GgmlType, PADDING_KEY, readGguf } from "@compat/gguf";
import { readTensorBytes } from "@compat/handlers";
import { killAllSpawned, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { greyImage, halfToFloat, mtmdAnswer, proveClip, valuesF32 } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

// Keys the native mmproj has with other values (both hard-coded by the reference; see findings.md):
const IGNORED = [
  // the reference writes 1280 (DeepSeek-OCR's text width); the native file has this fixture's 32. clip.cpp's
  // deepseekocr path takes the output width from mm.model.fc instead (llama-mtmd-cli below runs with 32)
  "clip.vision.projection_dim",
  // written by the converter with the values clip.cpp defaults deepseekocr to (2 and 9); the reference writes none
  "clip.vision.preproc_min_tiles",
  "clip.vision.preproc_max_tiles",
];

describe("deepseekocr clip handler (SAM + CLIP-L encoders and linear projector inline)", () => {
  it("our mmproj equals llama.cpp's native deepseekocr mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    const d = await dir();
    const promoted = ["v.patch_embd.weight", "v.sam.neck.0.weight", "v.sam.neck.2.weight", "v.sam.net_2.weight", "v.sam.net_3.weight"];
    const p = await proveClip(d, "deepseekocr", {
      seed: 4,
      // Ollama stored these F16 where the converter forces F32: promoted back, they are the native values rounded through F16
      twin: { ignoreKeys: IGNORED, roundedThrough: Object.fromEntries(promoted.map((n) => [n, GgmlType.F16])) },
    });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["deepseekocr-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("deepseekocr");
    // the reference's hard-coded values; feed_forward_length equals the native (CLIP heads * 4)
    expect(m.getNumber("clip.vision.feed_forward_length")).toBe(64);
    expect(m.getNumber("clip.vision.projection_dim")).toBe(1280);
    expect(m.getNumber("clip.vision.sam.block_count")).toBe(12);
    expect(m.findTensor("v.sam.pos_embd.weight")?.shape).toEqual([16, 64, 64, 1]);
    // kept F16 as llama.cpp's converter writes it for f16 output (the reference promotes it)
    expect(m.findTensor("v.sam.patch_embd.weight")?.type).toBe(GgmlType.F16);
    expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
    expect(m.keys().every((k) => k.startsWith("general.") || k.startsWith("clip.") || k === PADDING_KEY)).toBe(true);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    // element by element against the Ollama file: the promotes decode each F16 value
    // (checked with a half decoder written above), the reshaped separator keeps its values
    const source = await readGguf(p.ollamaPath);
    const pairs: Array<[string, string]> = [
      ["v.patch_embd.weight", "v.patch_embd.weight"],
      ["v.sam.neck.0.weight", "s.neck.0.weight"],
      ["v.sam.neck.2.weight", "s.neck.2.weight"],
      ["v.sam.net_2.weight", "s.net_2.weight"],
      ["v.sam.net_3.weight", "s.net_3.weight"],
    ];
    for (const [ours, theirs] of pairs) {
      const src = source.findTensor(theirs)!;
      expect(src.type, theirs).toBe(GgmlType.F16);
      const bytes = await readTensorBytes(src.data);
      const want = new Float32Array(bytes.length / 2);
      for (let i = 0; i < want.length; i++) want[i] = halfToFloat(bytes[2 * i]! | (bytes[2 * i + 1]! << 8));
      expect(m.findTensor(ours)?.type, ours).toBe(GgmlType.F32);
      expect(Array.from(await valuesF32(m, ours)), ours).toEqual(Array.from(want));
    }
    expect(m.findTensor("v.view_seperator")?.shape).toEqual([32, 1]);
    expect(Array.from(await valuesF32(m, "v.view_seperator"))).toEqual(Array.from(await valuesF32(source, "mm.view_seperator")));
    await source.close();
    await m.close();

    const image = await greyImage(d, 64, 128);
    const ours = await mtmdAnswer(p.textPath, p.mmprojPath, image, "deepseek-ocr");
    expect(ours.length).toBeGreaterThan(0);
    // the native pair runs too, so a failure above is ours and not the fixture's
    const native = await writeFixture(p.native, d);
    await mtmdAnswer(native.text, native.mmproj!, image, "deepseek-ocr");
    // clip.cpp always encodes a 1024-pixel image through 12 SAM blocks: about 10 s of CPU per run
  }, 900_000);
});
