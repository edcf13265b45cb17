import { GgufValueType } from "@compat/gguf";
import { promoteF16ToF32, u32Kv, type Translation } from "@compat/handlers";
import { mergeVisionQkv, QWEN_BF16_ON_CPU, splitPatchEmbedding, visionBlockCount } from "../qwen-tower";
import { asMmproj, widenBf16ForCpu } from "../tower";

/** Ollama's names, mapped to clip.cpp's (substring, first occurrence, in this order). */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  ["v.pos_embed", "v.position_embd"],
  ["v.patch_embed", "v.patch_embd"],
  ["v.merger.norm", "v.post_ln"],
  ["v.merger.linear_fc1", "mm.0"],
  ["v.merger.linear_fc2", "mm.2"],
  [".mlp.linear_fc1", ".ffn_up"],
  [".mlp.linear_fc2", ".ffn_down"],
  [".norm1", ".ln1"],
  [".norm2", ".ln2"],
];

/** What the reference writes for every Qwen 3.5 tower: Qwen3.5's own intermediate_size and 48 * 16 px. */
const REFERENCE_FFN = 4304;
const REFERENCE_IMAGE_SIZE = 768;

/**
 * The sizes llama.cpp's converter (Qwen3VLVisionModel) writes, read off the tower: the
 * FFN width is the rows of the first block's fc1, the image size sqrt(positions) * patch
 * (its fallback when the config has no image_size, truncated as int() does). Named fixes,
 * so `reference` keeps the hard-coded values.
 */
function fixTowerSizes(t: Translation, arch: string): void {
  const ffn = t.draft.findTensor("v.blk.0.mlp.linear_fc1.weight")?.shape[1];
  t.fix({
    name: `${arch}-clip-feed-forward-length`,
    reason: `the reference writes clip.vision.feed_forward_length ${REFERENCE_FFN} (Qwen3.5's tower) whatever the file holds; llama.cpp's converter writes the vision intermediate_size, which is the rows of v.blk.0.mlp.linear_fc1`,
    needed: () => ffn !== undefined && u32Kv(t.draft, "clip.vision.feed_forward_length") !== ffn,
    apply: () => t.setU32("clip.vision.feed_forward_length", ffn!),
  });
  const positions = t.draft.findTensor("v.pos_embed.weight")?.shape[1];
  const patch = u32Kv(t.draft, `${arch}.vision.patch_size`);
  const size = positions !== undefined && patch !== undefined ? Math.trunc(Math.sqrt(positions) * patch) : undefined;
  t.fix({
    name: `${arch}-clip-image-size`,
    reason: `the reference writes clip.vision.image_size ${REFERENCE_IMAGE_SIZE} (Qwen3.5's 2304 positions of 16 px) whatever the file holds; llama.cpp's converter writes sqrt(num_position_embeddings) * patch_size, read here from v.pos_embed and ${arch}.vision.patch_size`,
    needed: () => size !== undefined && size > 0 && u32Kv(t.draft, "clip.vision.image_size") !== size,
    apply: () => t.setU32("clip.vision.image_size", size!),
  });
}

/**
 * Qwen 3.5 dense and MoE (the reference's shared qwen35-like clip handler): a Qwen3-VL
 * tower without DeepStack, served with the qwen3vl_merger projector.
 */
export function applyQwen35Clip(t: Translation, arch: "qwen35" | "qwen35moe"): void {
  for (const k of ["block_count", "embedding_length", "attention.head_count", "patch_size", "spatial_merge_size", "num_channels"]) {
    t.copyKv(`${arch}.vision.${k}`, `clip.vision.${k}`);
  }
  t.copyKv(`${arch}.embedding_length`, "clip.vision.projection_dim");
  // Hard-coded by the reference (Qwen3.5's tower: intermediate_size 4304, 2304 positions of
  // 16 px); Ollama's file has neither key, though both follow from the tower's tensors.
  t.injectU32("clip.vision.feed_forward_length", REFERENCE_FFN);
  t.injectU32("clip.vision.image_size", REFERENCE_IMAGE_SIZE);
  fixTowerSizes(t, arch);
  t.injectF32("clip.vision.attention.layer_norm_epsilon", 1e-6);
  t.injectF32Array("clip.vision.image_mean", [0.5, 0.5, 0.5]);
  t.injectF32Array("clip.vision.image_std", [0.5, 0.5, 0.5]);
  // no DeepStack: one false per block, as llama.cpp's converter writes it
  const blocks = visionBlockCount(t);
  if (!t.draft.has("clip.vision.is_deepstack_layers") && blocks > 0) {
    t.setArray("clip.vision.is_deepstack_layers", GgufValueType.BOOL, Array.from({ length: blocks }, () => false));
  }
  t.injectBool("clip.has_vision_encoder", true);
  t.injectBool("clip.use_gelu", true);
  t.setString("clip.projector_type", "qwen3vl_merger");

  mergeVisionQkv(t, u32Kv(t.draft, "clip.vision.block_count") ?? 27);
  splitPatchEmbedding(t, u32Kv(t.draft, "clip.vision.num_channels") ?? 3, `${arch}-clip`);
  for (const [from, to] of RENAMES) t.renameTensorsContaining(from, to);
  // llama.cpp's converter keeps the position embedding F32; Ollama stored it F16
  promoteF16ToF32(t, "v.position_embd.weight");
  widenBf16ForCpu(t, `${arch}-clip`, QWEN_BF16_ON_CPU);
  asMmproj(t);
}
