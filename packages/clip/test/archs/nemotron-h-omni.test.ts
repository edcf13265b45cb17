import { GgmlType, PADDING_KEY, readGguf } from "@compat/gguf";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { killAllSpawned, runMtmdCli, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../../../handlers/test/helpers";
import { greyImage, mtmdAnswer, proveClip, valuesF32 } from "../proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

/**
 * The reference's resample written out independently: align-corners source coordinate in
 * double, weights and blend in f32, out[e + E*(y*T + x)], source position y*S + x.
 */
function referenceResample(src: Float32Array, e: number, s: number, t: number): Float32Array {
  const f = Math.fround;
  const out = new Float32Array(e * t * t);
  const coord = (i: number) => (t <= 1 ? 0 : (i * (s - 1)) / (t - 1));
  for (let y = 0; y < t; y++) {
    const sy = coord(y);
    const y0 = Math.floor(sy);
    const y1 = Math.min(y0 + 1, s - 1);
    const wy = f(sy - y0);
    for (let x = 0; x < t; x++) {
      const sx = coord(x);
      const x0 = Math.floor(sx);
      const x1 = Math.min(x0 + 1, s - 1);
      const wx = f(sx - x0);
      for (let k = 0; k < e; k++) {
        const v = (yy: number, xx: number) => src[k + e * (yy * s + xx)]!;
        const top = f(f(v(y0, x0) * f(1 - wx)) + f(v(y0, x1) * wx));
        const bottom = f(f(v(y1, x0) * f(1 - wx)) + f(v(y1, x1) * wx));
        out[k + e * (y * t + x)] = f(f(top * f(1 - wy)) + f(bottom * wy));
      }
    }
  }
  return out;
}

/** A 16 kHz mono 16-bit PCM WAV of `samples` zeros. */
function silentWav(samples: number): Buffer {
  const h = Buffer.alloc(44);
  h.write("RIFF", 0);
  h.writeUInt32LE(36 + samples * 2, 4);
  h.write("WAVEfmt ", 8);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20);
  h.writeUInt16LE(1, 22);
  h.writeUInt32LE(16000, 24);
  h.writeUInt32LE(32000, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write("data", 36);
  h.writeUInt32LE(samples * 2, 40);
  return Buffer.concat([h, Buffer.alloc(samples * 2)]);
}

describe("nemotron_h_omni clip handler (RADIO tower and mlp1 projector inline; audio not served)", () => {
  it.each(["vl", "omni"])("%s: our mmproj equals llama.cpp's native nemotron_v2_vl mmproj, and llama-mtmd-cli answers an image prompt with our pair", async (variant) => {
    const d = await dir();
    const p = await proveClip(d, "nemotron_h_omni", {
      seed: 6,
      variant,
      // Ollama stored cls_token F16 where the converter keeps it F32: promoted back, the native values rounded through F16
      twin: { roundedThrough: { "v.class_embd": GgmlType.F16 } },
    });
    // everything but the resampled position grid is equal bit for bit (that one is checked below)
    expect({ ...p.diff, data: p.diff.data.filter((n) => n !== "v.position_embd.weight") }).toEqual({ kv: [], missingTensors: [], extraTensors: [], layout: [], data: [] });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["nemotron_h_omni-clip"]);
    const m = p.mmproj;
    expect(m.getString("clip.projector_type")).toBe("nemotron_v2_vl");
    expect(m.getString("clip.vision.projector_type")).toBe("nemotron_v2_vl");
    // audio is not supported: said so in the file, and no audio tensor is served
    expect(m.getBool("clip.has_audio_encoder")).toBe(false);
    expect(m.tensors.some((t) => t.name.startsWith("a.") || t.name.startsWith("mm.a."))).toBe(false);
    if (variant === "omni") expect(p.view.report.tensors.hidden.some((n) => n.startsWith("a.blk."))).toBe(true);
    expect(m.keys().every((k) => k.startsWith("general.") || k.startsWith("clip.") || k === PADDING_KEY)).toBe(true);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    const source = await readGguf(p.ollamaPath);
    // position grid: 8x8 at max resolution -> (64 / 16)^2, exactly the reference's computation,
    // and within float rounding of the converter's (torch computes the coordinates in float)
    const e = source.findTensor("v.position_embd")!.shape[0]!;
    const grid = await valuesF32(source, "v.position_embd");
    const want = referenceResample(grid, e, 8, 4);
    expect(m.findTensor("v.position_embd.weight")?.shape).toEqual([e, 16, 1]);
    expect(m.findTensor("v.position_embd.weight")?.type).toBe(GgmlType.F32);
    const ours = await valuesF32(m, "v.position_embd.weight");
    expect(Array.from(ours)).toEqual(Array.from(want));
    const native = await valuesF32(p.native.mmproj!, "v.position_embd.weight");
    for (let i = 0; i < ours.length; i++) expect(Math.abs(ours[i]! - native[i]!), `position ${i}`).toBeLessThanOrEqual(1e-6);

    // patch embedding: the same bytes viewed as [16, 16, 3, E], F16 as the converter writes it
    expect(m.findTensor("v.patch_embd.weight")?.shape).toEqual([16, 16, 3, e]);
    expect(m.findTensor("v.patch_embd.weight")?.type).toBe(GgmlType.F16);
    expect(Array.from(await valuesF32(m, "v.patch_embd.weight"))).toEqual(Array.from(await valuesF32(source, "v.patch_embd.weight")));
    // fused QKV: q rows, then k, then v
    for (const suffix of ["weight", "bias"]) {
      const parts = await Promise.all(["attn_q", "attn_k", "attn_v"].map((x) => valuesF32(source, `v.blk.1.${x}.${suffix}`)));
      expect(Array.from(await valuesF32(m, `v.blk.1.attn_qkv.${suffix}`))).toEqual(parts.flatMap((x) => Array.from(x)));
    }
    await source.close();
    await m.close();

    const image = await greyImage(d, 64, 128);
    const answer = await mtmdAnswer(p.textPath, p.mmprojPath, image, "chatml");
    expect(answer.length).toBeGreaterThan(0);
    // the native pair runs too, so a failure above is ours and not the fixture's
    const nativeFiles = await writeFixture(p.native, d);
    await mtmdAnswer(nativeFiles.text, nativeFiles.mmproj!, image, "chatml");

    if (variant === "omni") {
      // the audio path is refused cleanly (an error exit, not a crash): the mmproj has no audio encoder
      const wav = join(d, "silence.wav");
      await writeFile(wav, silentWav(1600));
      const run = await runMtmdCli({ model: p.textPath, mmproj: p.mmprojPath, image: wav, prompt: "Transcribe.", args: ["--chat-template", "chatml"] });
      expect(run.ok).toBe(false);
      expect(run.signal).toBeNull();
      expect(run.timedOut).toBe(false);
      expect(run.stderr).toMatch(/does not support audio input/);
    }
  }, 900_000);
});
