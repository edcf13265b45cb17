// Independent F32 computations of what the Qwen3-VL-style clip views must hold, from the
// Ollama file's own values (shared by the qwen3vl, qwen3vlmoe, qwen35 and qwen35moe proofs).
import { GgmlType, readGguf, type GgufModel } from "@compat/gguf";
import { expect } from "vitest";
import { valuesF32 } from "./proof";

/** attn_qkv = q ‖ k ‖ v (weights and biases) for every vision block, element by element. */
export async function expectFusedQkv(ours: GgufModel, source: GgufModel, blocks: number): Promise<void> {
  for (let b = 0; b < blocks; b++) {
    for (const suffix of ["weight", "bias"]) {
      const parts = await Promise.all(["q", "k", "v"].map((x) => valuesF32(source, `v.blk.${b}.attn_${x}.${suffix}`)));
      const want: number[] = parts.flatMap((p) => Array.from(p));
      const name = `v.blk.${b}.attn_qkv.${suffix}`;
      expect(Array.from(await valuesF32(ours, name)), name).toEqual(want);
    }
  }
}

/**
 * The two per-frame kernels from Ollama's v.patch_embed.weight [P, P, T=2, C_out*C_in]:
 * element (x, y, c_in, c_out) of frame f = source element (x, y, f, c_out*C_in + c_in).
 */
export async function expectPatchFrames(ours: GgufModel, source: GgufModel, channels: number): Promise<void> {
  const src = await valuesF32(source, "v.patch_embed.weight");
  const [w, h, frames, packed] = source.findTensor("v.patch_embed.weight")!.shape as [number, number, number, number];
  const cOut = packed / channels;
  for (const [name, frame] of [["v.patch_embd.weight", 0], ["v.patch_embd.weight.1", 1]] as const) {
    expect(ours.findTensor(name)?.shape).toEqual([w, h, channels, cOut]);
    const want = new Float32Array(w * h * channels * cOut);
    for (let co = 0; co < cOut; co++) {
      for (let ci = 0; ci < channels; ci++) {
        for (let i = 0; i < w * h; i++) want[i + w * h * (ci + channels * co)] = src[i + w * h * (frame + frames * (co * channels + ci))]!;
      }
    }
    expect(Array.from(await valuesF32(ours, name)), name).toEqual(Array.from(want));
  }
}

export const F16 = GgmlType.F16;

/** expectFusedQkv over `blocks` blocks and expectPatchFrames over `channels`, against the Ollama file at `ollamaPath`. */
export async function expectTowerFromSource(ours: GgufModel, ollamaPath: string, blocks: number, channels: number): Promise<void> {
  const source = await readGguf(ollamaPath);
  try {
    await expectFusedQkv(ours, source, blocks);
    await expectPatchFrames(ours, source, channels);
  } finally {
    await source.close();
  }
}
