// The proof shared by the qwen35 and qwen35moe clip tests (the reference's one qwen35-like handler).
import { GgmlType } from "@compat/gguf";

import { expect } from "vitest";
import { NO_DIFFERENCES } from "../../handlers/test/proof";
import { expectAnswersLikeNative, greyImage, proveClip } from "./proof";
import { expectTowerFromSource } from "./qwen-tower";

/** Ollama stored v.pos_embed F16; llama.cpp's converter keeps it F32: compared through F16. */
const TWIN = { roundedThrough: { "v.position_embd.weight": GgmlType.F16 } };

export async function proveQwen35Clip(d: string, arch: "qwen35" | "qwen35moe", variant: string, seed: number): Promise<void> {
  const p = await proveClip(d, arch, { seed, variant, twin: TWIN });
  expect(p.diff).toEqual(NO_DIFFERENCES);
  expect(p.view.report.handlers.map((h) => h.name)).toEqual([`${arch}-clip`]);
  const m = p.mmproj;
  expect(m.getString("clip.projector_type")).toBe("qwen3vl_merger");
  // the reference's hard-coded values, which the fixture's tower is sized to
  expect(m.getNumber("clip.vision.feed_forward_length")).toBe(4304);
  expect(m.getNumber("clip.vision.image_size")).toBe(768);
  expect(m.getArray("clip.vision.is_deepstack_layers").toArray()).toEqual([false]);
  expect(m.findTensor("v.blk.0.attn_qkv.weight")?.type).toBe(GgmlType.F16);
  expect(m.findTensor("v.patch_embd.weight")?.type).toBe(GgmlType.F16);
  expect(m.findTensor("v.position_embd.weight")?.type).toBe(GgmlType.F32);
  expect(m.tensors.every((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(true);
  expect(m.tensors.some((t) => /attn_[qkv]\./.test(t.name) || t.name.includes("patch_embed"))).toBe(false);
  expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  await expectTowerFromSource(m, p.ollamaPath, 1, 3);
  await m.close();

  const image = await greyImage(d, 96, 128 + seed);
  await expectAnswersLikeNative(p, d, image, "chatml");
}
