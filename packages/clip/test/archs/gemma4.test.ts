import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { GgmlType, PADDING_KEY, readGguf, readTensorData, type GgufModel } from "@compat/gguf";
import { clipView, clipViewModel } from "@compat/clip";
import { generateFixture, killAllSpawned, runMtmdCli, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { NO_DIFFERENCES } from "../../../handlers/test/proof";
import { EMBEDDINGS_DIFFER, embeddingDistance, expectAnswersLikeNative, greyImage, halfToFloat, mediaEmbeddings, mtmdAnswer, proveClip } from "../proof";

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
      expect(m.keys().every((k) => k.startsWith("general.") || k.startsWith("clip.") || k === PADDING_KEY)).toBe(true);
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
      await expectAnswersLikeNative(p, d, image, "gemma", IMAGE_BUDGET);
    },
  );
});

async function rawValues(m: GgufModel, name: string): Promise<{ type: number; values: number[] }> {
  const t = m.findTensor(name);
  if (t === undefined) throw new Error(`no ${name}`);
  const bytes = await readTensorData(t);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = t.shape.reduce((a, b) => a * b, 1);
  if (t.type === GgmlType.F16) return { type: t.type, values: Array.from({ length: n }, (_, i) => halfToFloat(view.getUint16(2 * i, true))) };
  if (t.type === GgmlType.F32) return { type: t.type, values: Array.from({ length: n }, (_, i) => view.getFloat32(4 * i, true)) };
  throw new Error(`${name}: type ${t.type}`);
}

/** One second of a 440 Hz sine, 16 kHz mono 16-bit PCM WAV (what Gemma 4's feature extractor takes). */
async function sineWav(dir: string): Promise<string> {
  const rate = 16000;
  const n = rate;
  const pcm = Buffer.alloc(2 * n);
  for (let i = 0; i < n; i++) pcm.writeInt16LE(Math.round(0.5 * 32767 * Math.sin((2 * Math.PI * 440 * i) / rate)), 2 * i);
  const header = Buffer.alloc(44);
  header.write("RIFF", 0);
  header.writeUInt32LE(36 + pcm.length, 4);
  header.write("WAVE", 8);
  header.write("fmt ", 12);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write("data", 36);
  header.writeUInt32LE(pcm.length, 40);
  const path = join(dir, "sine-440.wav");
  await writeFile(path, Buffer.concat([header, pcm]));
  return path;
}

describe("gemma4 clip handler (gemma4v vision and gemma4a audio towers inline)", () => {
  it("dense: our mmproj equals llama.cpp's native vision+audio mmproj, and llama-mtmd-cli answers an image and an audio prompt with our pair", async () => {
    const d = await dir();
    const p = await proveClip(d, "gemma4", {
      seed: 5,
      variant: "dense",
      // Ollama stored the SSCP input projection F16 where llama.cpp's converter forces F32:
      // promoted back, it holds the native values rounded through F16, and nothing better exists in the file
      twin: { roundedThrough: { "a.input_projection.weight": GgmlType.F16 } },
    });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["gemma4-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.vision.projector_type")).toBe("gemma4v");
    expect(m.getString("clip.audio.projector_type")).toBe("gemma4a");
    expect(m.getBool("clip.has_audio_encoder")).toBe(true);
    // derived from the SSCP projection's width (8 channels x 16 / 4); 128 on every published Gemma 4
    expect(m.getNumber("clip.audio.num_mel_bins")).toBe(16);
    // current clip.cpp takes gemma4a's output width from these rows: the text model's width, no hook needed
    expect(m.findTensor("mm.a.input_projection.weight")?.shape[1]).toBe(m.getNumber("clip.audio.projection_dim"));
    expect(m.tensors.every((t) => /^(v|a|mm)\./.test(t.name))).toBe(true);
    expect(p.view.report.ops.map((o) => o.tensor)).toEqual(["a.input_projection.weight"]);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    // the one computed tensor, element by element against the Ollama file's F16 bits decoded here
    const source = await readGguf(p.ollamaPath);
    const src = await rawValues(source, "a.pre_encode.out.weight");
    expect(src.type).toBe(GgmlType.F16);
    const ours = await rawValues(m, "a.input_projection.weight");
    expect(ours.type).toBe(GgmlType.F32);
    expect(ours.values).toEqual(src.values.map((v) => Math.fround(v)));
    // the renamed tensors are the Ollama bytes: the output projection, and a block's norms swapped by name
    for (const [from, to] of [
      ["mm.a.fc.weight", "a.pre_encode.out.weight"],
      ["mm.a.fc.bias", "a.pre_encode.out.bias"],
      ["a.blk.0.ln1.weight", "a.blk.0.attn_pre_norm.weight"],
      ["a.blk.0.ln2.weight", "a.blk.0.attn_post_norm.weight"],
      ["a.blk.0.layer_pre_norm.weight", "a.blk.0.ln2.weight"],
      ["a.blk.0.linear_pos.weight", "a.blk.0.attn_k_rel.weight"],
    ] as const) {
      expect((await rawValues(m, to)).values, `${from} -> ${to}`).toEqual((await rawValues(source, from)).values);
    }
    await source.close();
    await m.close();

    const native = await writeFixture(p.native, d);
    const image = await greyImage(d, 64, 128);
    expect((await mtmdAnswer(p.textPath, p.mmprojPath, image, "gemma", IMAGE_BUDGET)).length).toBeGreaterThan(0);
    expect(await mtmdAnswer(native.text, p.mmprojPath, image, "gemma", IMAGE_BUDGET)).toBe(
      await mtmdAnswer(native.text, native.mmproj!, image, "gemma", IMAGE_BUDGET),
    );

    const wav = await sineWav(d);
    expect((await mtmdAnswer(p.textPath, p.mmprojPath, wav, "gemma")).length).toBeGreaterThan(0);
    expect(await mtmdAnswer(native.text, p.mmprojPath, wav, "gemma")).toBe(await mtmdAnswer(native.text, native.mmproj!, wav, "gemma"));
  });
});

describe("gemma4 clip handler, profiles", () => {
  it("gemma4-clip-num-mel-bins: the reference's 128 mel bins do not fit the toy tower's 16-bin SSCP; native derives 16 and llama-mtmd-cli encodes audio as with the native mmproj", async () => {
    const d = join(await dir(), "mel-bins");
    const p = await proveClip(d, "gemma4", { seed: 5, variant: "dense", twin: { roundedThrough: { "a.input_projection.weight": GgmlType.F16 } } });
    expect(p.view.report.fixes.map((f) => f.name)).toEqual(["gemma4-clip-num-mel-bins"]);
    expect(p.mmproj.getNumber("clip.audio.num_mel_bins")).toBe(16);
    const reference = await clipView(p.ollamaPath, { profile: "reference" });
    expect(reference!.report.gapsKept.map((f) => f.name)).toEqual(["gemma4-clip-num-mel-bins"]);
    expect(reference!.model.getNumber("clip.audio.num_mel_bins")).toBe(128);
    const referencePath = join(d, "mmproj-gemma4-reference.gguf");
    await reference!.writeTo(referencePath);
    await reference!.close();
    const native = await writeFixture(p.native, d);
    const wav = await sineWav(d);
    const want = await mediaEmbeddings(native.text, native.mmproj!, wav, "gemma");
    expect(embeddingDistance(await mediaEmbeddings(native.text, p.mmprojPath, wav, "gemma"), want)).toBeLessThan(EMBEDDINGS_DIFFER);
    const run = await runMtmdCli({ model: native.text, mmproj: referencePath, image: wav, prompt: "Transcribe.", args: ["--chat-template", "gemma"] });
    // 128-bin features into an SSCP projection made for 16 bins: llama.cpp aborts
    expect(run.ok).toBe(false);
    expect(run.signal).toBe("SIGABRT");
    expect(run.stderr).toMatch(/GGML_ASSERT\(ggml_can_mul_mat\(a, b\)\)/);
  }, 300_000);
});

describe("gemma4 clip handler without the audio embedder", () => {
  it("serves the vision tower only when mm.a.input_projection.weight is missing (clip.cpp reads gemma4a's width from it)", () => {
    const m = generateFixture("gemma4", { seed: 5, layout: "ollama", variant: "dense" }).text;
    m.dropTensor("mm.a.input_projection.weight");
    const view = clipViewModel(m);
    expect(view).not.toBeNull();
    const out = view!.model;
    expect(out.getString("clip.vision.projector_type")).toBe("gemma4v");
    expect(out.keys().filter((k) => k.startsWith("clip.audio.") || k === "clip.has_audio_encoder")).toEqual([]);
    expect(out.tensors.filter((t) => t.name.startsWith("a.") || t.name.startsWith("mm.a."))).toEqual([]);
    expect(out.tensors.some((t) => t.name.startsWith("v."))).toBe(true);
  });
});
