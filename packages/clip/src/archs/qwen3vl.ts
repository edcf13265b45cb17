import { GgufValueType } from "@compat/gguf";
import { intArrayKv, promoteF16ToF32, stringKv, u32Kv, type Handler } from "@compat/handlers";
import { mergeVisionQkv, QWEN_BF16_ON_CPU, splitPatchEmbedding, visionBlockCount } from "../qwen-tower";
import { asMmproj, embeddedVision, widenBf16ForCpu } from "../tower";

/** Ollama's names for the merger, patch bias and position embedding, mapped to clip.cpp's. */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  ["v.merger.norm.weight", "v.post_ln.weight"],
  ["v.merger.norm.bias", "v.post_ln.bias"],
  ["v.merger.linear_fc1.weight", "mm.0.weight"],
  ["v.merger.linear_fc1.bias", "mm.0.bias"],
  ["v.merger.linear_fc2.weight", "mm.2.weight"],
  ["v.merger.linear_fc2.bias", "mm.2.bias"],
  ["v.patch_embed.bias", "v.patch_embd.bias"],
  ["v.pos_embed.weight", "v.position_embd.weight"],
];

/** Per-block leaves (substring, first occurrence), after the full-name renames above. */
const BLOCK_RENAMES: ReadonlyArray<readonly [string, string]> = [
  [".norm1", ".ln1"],
  [".norm2", ".ln2"],
  [".mlp.linear_fc1", ".ffn_up"],
  [".mlp.linear_fc2", ".ffn_down"],
];

/** DeepStack merger leaves: Ollama's, clip.cpp's. */
const DEEPSTACK_LEAVES: ReadonlyArray<readonly [string, string]> = [
  ["norm", "norm"],
  ["linear_fc1", "fc1"],
  ["linear_fc2", "fc2"],
];

/**
 * Qwen3-VL dense and MoE: the ViT, the patch merger and the DeepStack mergers inline.
 * As in the reference, only Ollama files without `<arch>.rope.dimension_sections` (the
 * text side's marker) are claimed.
 */
export const qwen3vlClip: Handler = {
  name: "qwen3vl-clip",
  arch: ["qwen3vl", "qwen3vlmoe"],
  detect(m) {
    const arch = stringKv(m, "general.architecture");
    if (m.has(`${arch}.rope.dimension_sections`)) return null;
    return embeddedVision(m);
  },
  apply(t) {
    const a = t.arch;
    for (const k of ["attention.head_count", "attention.layer_norm_epsilon", "block_count", "embedding_length", "num_channels", "patch_size", "spatial_merge_size", "temporal_patch_size", "rope.freq_base"]) {
      t.copyKv(`${a}.vision.${k}`, `clip.vision.${k}`);
    }
    t.copyKv(`${a}.embedding_length`, "clip.vision.projection_dim");
    // not read by clip.cpp's qwen3vl_merger (it fixes these itself); the reference's defaults
    t.injectU32("clip.vision.num_channels", 3);
    t.injectU32("clip.vision.temporal_patch_size", 2);
    t.injectF32("clip.vision.rope.freq_base", 10000);
    const fc1 = t.draft.findTensor("v.blk.0.mlp.linear_fc1.weight");
    if (fc1?.shape[1] !== undefined) t.injectU32("clip.vision.feed_forward_length", fc1.shape[1]);
    // image_size = sqrt(num_position_embeddings) * patch_size, as llama.cpp's converter derives it
    const positions = t.draft.findTensor("v.pos_embed.weight")?.shape[1];
    const patch = u32Kv(t.draft, `${a}.vision.patch_size`);
    if (positions !== undefined && patch !== undefined) t.injectU32("clip.vision.image_size", Math.floor(Math.sqrt(positions)) * patch);
    t.copyKv(`${a}.vision.image_mean`, "clip.vision.image_mean");
    t.copyKv(`${a}.vision.image_std`, "clip.vision.image_std");
    // not read by clip.cpp for this projector (it sets its own token limits); kept from the reference
    t.copyKv(`${a}.vision.shortest_edge`, "clip.vision.image_min_pixels");
    t.copyKv(`${a}.vision.longest_edge`, "clip.vision.image_max_pixels");
    t.injectU32("clip.vision.image_min_pixels", 65536);
    t.injectU32("clip.vision.image_max_pixels", 16777216);
    t.injectF32Array("clip.vision.image_mean", [0.5, 0.5, 0.5]);
    t.injectF32Array("clip.vision.image_std", [0.5, 0.5, 0.5]);
    const blocks = visionBlockCount(t);
    const deepstack = intArrayKv(t.draft, `${a}.vision.deepstack_visual_indexes`) ?? [];
    if (!t.draft.has("clip.vision.is_deepstack_layers") && blocks > 0) {
      const mask = Array.from({ length: blocks }, (_, i) => deepstack.includes(i));
      t.setArray("clip.vision.is_deepstack_layers", GgufValueType.BOOL, mask);
    }
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_gelu", true);
    t.setString("clip.projector_type", "qwen3vl_merger");

    mergeVisionQkv(t, u32Kv(t.draft, "clip.vision.block_count") ?? 27);
    splitPatchEmbedding(t, u32Kv(t.draft, `${a}.vision.num_channels`) ?? 3, "qwen3vl-clip");
    for (const [from, to] of RENAMES) t.renameTensor(from, to);
    // merger K feeds after vision layer deepstack_visual_indexes[K]: clip.cpp names it by that layer
    deepstack.forEach((layer, k) => {
      for (const [from, to] of DEEPSTACK_LEAVES) {
        for (const suffix of ["weight", "bias"]) t.renameTensor(`v.deepstack_merger.${k}.${from}.${suffix}`, `v.deepstack.${layer}.${to}.${suffix}`);
      }
    });
    for (const [from, to] of BLOCK_RENAMES) t.renameTensorsContaining(from, to);
    // llama.cpp's converter keeps the position embedding F32; Ollama stored it F16
    promoteF16ToF32(t, "v.position_embd.weight");
    widenBf16ForCpu(t, "qwen3vl-clip", QWEN_BF16_ON_CPU);
    asMmproj(t);
  },
};
