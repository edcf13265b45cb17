// The proof shared by the qwen35 and qwen35moe clip tests (the reference's one qwen35-like handler).
import { join } from "node:path";
import { GgmlType, GgufValueType, readGguf } from "@compat/gguf";
import { clipView } from "@compat/clip";
import { expect } from "vitest";
import { NO_DIFFERENCES } from "../../handlers/test/proof";
import { compareWithNative } from "../../handlers/test/twin";
import { expectAnswersLikeNative, greyImage, mtmdAnswer, proveClip } from "./proof";
import { expectTowerFromSource } from "./qwen-tower";

/** Ollama stored v.pos_embed F16; llama.cpp's converter keeps it F32: compared through F16. */
const TWIN = { roundedThrough: { "v.position_embd.weight": GgmlType.F16 } };

export async function proveQwen35Clip(d: string, arch: "qwen35" | "qwen35moe", variant: string, seed: number): Promise<void> {
  const p = await proveClip(d, arch, { seed, variant, twin: TWIN });
  expect(p.diff).toEqual(NO_DIFFERENCES);
  expect(p.view.report.handlers.map((h) => h.name)).toEqual([`${arch}-clip`]);
  // Qwen3.5's own tower: the reference's hard-coded sizes are right, nothing to fix
  expect(p.view.report.fixes).toEqual([]);
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

/**
 * A tower of other sizes than Qwen3.5's: `native` writes the FFN width and image size
 * llama.cpp's converter writes (equal to the twin's mmproj, and llama-mtmd-cli answers
 * like the native pair); `reference` keeps the hard-coded 4304 / 768, which differ from
 * the twin in exactly those two keys. clip.cpp's qwen3vl_merger reads neither for its
 * graph (tensor shapes and the position grid decide), so the reference mmproj still
 * answers the same: the gap is in what the file says, not in what llama.cpp computes.
 */
export async function proveQwen35TowerSizes(d: string, arch: "qwen35" | "qwen35moe", variant: string, seed: number, want: { ff: number; imageSize: number }): Promise<void> {
  const p = await proveClip(d, arch, { seed, variant, twin: TWIN });
  expect(p.diff).toEqual(NO_DIFFERENCES);
  expect(p.view.report.profile).toBe("native");
  expect(p.view.report.fixes.map((f) => f.name)).toEqual([`${arch}-clip-feed-forward-length`, `${arch}-clip-image-size`]);
  expect(p.mmproj.getNumber("clip.vision.feed_forward_length")).toBe(want.ff);
  expect(p.mmproj.getNumber("clip.vision.image_size")).toBe(want.imageSize);
  // the values come from the tower itself: fc1 rows, sqrt(positions) * patch
  const native = p.native.mmproj!;
  expect(p.mmproj.getNumber("clip.vision.feed_forward_length")).toBe(native.findTensor("v.blk.0.ffn_up.weight")!.shape[1]);
  expect(p.mmproj.getNumber("clip.vision.image_size")).toBe(Math.sqrt(native.findTensor("v.position_embd.weight")!.shape[1]!) * native.getNumber("clip.vision.patch_size"));
  await p.mmproj.close();

  const reference = await clipView(p.ollamaPath, { profile: "reference" });
  if (reference === null) throw new Error("no clip view under the reference profile");
  expect(reference.report.fixes).toEqual([]);
  expect(reference.report.gapsKept).toEqual(p.view.report.fixes);
  const referencePath = join(d, `mmproj-${arch}-${variant}-reference.gguf`);
  await reference.writeTo(referencePath);
  await reference.close();
  const refModel = await readGguf(referencePath);
  expect(refModel.getNumber("clip.vision.feed_forward_length")).toBe(4304);
  expect(refModel.getNumber("clip.vision.image_size")).toBe(768);
  const refDiff = await compareWithNative(refModel, native, TWIN);
  await refModel.close();
  // exactly the two hard-coded keys differ from llama.cpp's converter; tensors are the same
  expect({ ...refDiff, kv: [...refDiff.kv].sort() }).toEqual({
    ...NO_DIFFERENCES,
    kv: [
      `clip.vision.feed_forward_length: "4304" (type ${GgufValueType.UINT32}) vs native "${want.ff}" (type ${GgufValueType.UINT32})`,
      `clip.vision.image_size: "768" (type ${GgufValueType.UINT32}) vs native "${want.imageSize}" (type ${GgufValueType.UINT32})`,
    ].sort(),
  });

  const image = await greyImage(d, 96, 128 + seed);
  const twin = await expectAnswersLikeNative(p, d, image, "chatml");
  expect(await mtmdAnswer(twin.text, referencePath, image, "chatml")).toBe(await mtmdAnswer(twin.text, twin.mmproj!, image, "chatml"));
}
