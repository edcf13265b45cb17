import { GgufValueType } from "@compat/gguf";
import type { Handler } from "@compat/handlers";
import { asMmproj, embeddedVision } from "../tower";

/**
 * Ollama's Llama 4 vision names, mapped to clip.cpp's (substring, first occurrence, in
 * this order). The adapter's MLP must be renamed before the generic `.mlp.fc*` rules.
 */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  ["v.vision_adapter.mlp.fc1", "mm.model.mlp.1"],
  ["v.vision_adapter.mlp.fc2", "mm.model.mlp.2"],
  ["mm.linear_1", "mm.model.fc"],
  ["v.class_embedding", "v.class_embd"],
  ["v.layernorm_post", "v.post_ln"],
  ["v.layernorm_pre", "v.pre_ln"],
  ["v.patch_embedding", "v.patch_embd"],
  [".attn_output", ".attn_out"],
  [".attn_norm", ".ln1"],
  [".ffn_norm", ".ln2"],
  [".mlp.fc1", ".ffn_up"],
  [".mlp.fc2", ".ffn_down"],
];

/** Llama 4 Scout/Maverick: the vision tower, pixel-shuffle adapter and projector inline. */
export const llama4Clip: Handler = {
  name: "llama4-clip",
  arch: "llama4",
  detect: embeddedVision,
  apply(t) {
    t.copyKv("llama4.vision.block_count", "clip.vision.block_count");
    t.copyKv("llama4.vision.embedding_length", "clip.vision.embedding_length");
    t.copyKv("llama4.vision.feed_forward_length", "clip.vision.feed_forward_length");
    t.copyKv("llama4.vision.attention.head_count", "clip.vision.attention.head_count");
    t.copyKv("llama4.vision.image_size", "clip.vision.image_size");
    t.copyKv("llama4.vision.patch_size", "clip.vision.patch_size");
    t.copyKv("llama4.vision.layer_norm_epsilon", "clip.vision.attention.layer_norm_epsilon");
    t.copyKv("llama4.embedding_length", "clip.vision.projection_dim");
    t.injectU32("clip.vision.projector.scale_factor", pixelShuffleFactor(t.draft.get("llama4.vision.pixel_shuffle_ratio")));
    t.injectF32Array("clip.vision.image_mean", [0.5, 0.5, 0.5]);
    t.injectF32Array("clip.vision.image_std", [0.5, 0.5, 0.5]);
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_gelu", true);
    t.setString("clip.projector_type", "llama4");
    t.setString("clip.vision.projector_type", "llama4");
    t.renameTensor("v.positional_embedding_vlm", "v.position_embd.weight");
    for (const [from, to] of RENAMES) t.renameTensorsContaining(from, to);
    asMmproj(t);
  },
};

/** Patches merged per side: 1 / pixel_shuffle_ratio (0.5 in every released Llama 4), default 2. */
function pixelShuffleFactor(kv: { type: GgufValueType; value: unknown } | undefined): number {
  if (kv?.type !== GgufValueType.FLOAT32 || typeof kv.value !== "number" || !(kv.value > 0)) return 2;
  return Math.round(1 / kv.value);
}
