import { join } from "node:path";
import { GgmlType, GgufValueType, PADDING_KEY, readGguf, readTensorData } from "@compat/gguf";
import { clipView } from "@compat/clip";
import type {  } from "@compat/handlers";
import { killAllSpawned, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { compareWithNative } from "../../../handlers/test/twin";
import { greyImage, halfToFloat, mtmdAnswer, proveClip, valuesF32 } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

// Keys the native mmproj has that the reference does not write (see findings.md):
const IGNORED = [
  // written by the converter with the values clip.cpp defaults deepseekocr to (2 and 9); the reference writes none
  "clip.vision.preproc_min_tiles",
  "clip.vision.preproc_max_tiles",
];
const PROMOTED = ["v.patch_embd.weight", "v.sam.neck.0.weight", "v.sam.neck.2.weight", "v.sam.net_2.weight", "v.sam.net_3.weight"];
// Ollama stored these F16 where the converter forces F32: promoted back, they are the native values rounded through F16
const TWIN = { ignoreKeys: IGNORED, roundedThrough: Object.fromEntries(PROMOTED.map((n) => [n, GgmlType.F16])) };

describe("deepseekocr clip handler (SAM + CLIP-L encoders and linear projector inline)", () => {
  it("our mmproj equals llama.cpp's native deepseekocr mmproj, and llama-mtmd-cli answers an image prompt with our pair", async () => {
    const d = await dir();
    const p = await proveClip(d, "deepseekocr", { seed: 4, twin: TWIN });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["deepseekocr-clip"]);
    // the reference's 1280 is DeepSeek-OCR's text width, not this fixture's 32
    expect(p.view.report.fixes.map((f) => f.name)).toEqual(["deepseekocr-clip-projection-dim"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("deepseekocr");
    // the reference's feed_forward_length 64 is right here (16 CLIP heads * 4, as the converter writes it)
    expect(m.getNumber("clip.vision.feed_forward_length")).toBe(64);
    expect(m.getNumber("clip.vision.projection_dim")).toBe(32);
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
      const bytes = await readTensorData(src);
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

  it("an 8-head CLIP: native writes feed_forward_length (heads * 4) and projection_dim (text width) as llama.cpp's converter does; reference keeps 64 / 1280", async () => {
    const d = await dir();
    const p = await proveClip(d, "deepseekocr", { seed: 5, variant: "3b-8-heads", twin: TWIN });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.fixes.map((f) => f.name)).toEqual(["deepseekocr-clip-feed-forward-length", "deepseekocr-clip-projection-dim"]);
    expect(p.mmproj.getNumber("clip.vision.attention.head_count")).toBe(8);
    expect(p.mmproj.getNumber("clip.vision.feed_forward_length")).toBe(32);
    expect(p.mmproj.getNumber("clip.vision.projection_dim")).toBe(32);
    await p.mmproj.close();

    const reference = await clipView(p.ollamaPath, { profile: "reference" });
    if (reference === null) throw new Error("no clip view under the reference profile");
    expect(reference.report.fixes).toEqual([]);
    expect(reference.report.gapsKept).toEqual(p.view.report.fixes);
    const referencePath = join(d, "mmproj-deepseekocr-3b-8-heads-reference.gguf");
    await reference.writeTo(referencePath);
    await reference.close();
    const refModel = await readGguf(referencePath);
    const refDiff = await compareWithNative(refModel, p.native.mmproj!, TWIN);
    await refModel.close();
    // exactly the two hard-coded keys differ from llama.cpp's converter; tensors are the same
    const u32 = GgufValueType.UINT32;
    expect({ ...refDiff, kv: [...refDiff.kv].sort() }).toEqual({
      ...NO_DIFFERENCES,
      kv: [
        `clip.vision.feed_forward_length: "64" (type ${u32}) vs native "32" (type ${u32})`,
        `clip.vision.projection_dim: "1280" (type ${u32}) vs native "32" (type ${u32})`,
      ].sort(),
    });

    // clip.cpp's deepseekocr graph reads neither key (output width from mm.model.fc): both mmprojs
    // answer alike with our text GGUF, and the native pair runs too
    const image = await greyImage(d, 64, 129);
    const ours = await mtmdAnswer(p.textPath, p.mmprojPath, image, "deepseek-ocr");
    expect(ours.length).toBeGreaterThan(0);
    expect(await mtmdAnswer(p.textPath, referencePath, image, "deepseek-ocr")).toBe(ours);
    const native = await writeFixture(p.native, d);
    await mtmdAnswer(native.text, native.mmproj!, image, "deepseek-ocr");
  }, 900_000);
});
