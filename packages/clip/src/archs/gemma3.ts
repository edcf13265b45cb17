import { promoteF16ToF32, type Handler } from "@compat/handlers";
import { asMmproj, embeddedVision, widenBf16ForCpu } from "../tower";

/** Ollama's SigLIP names, mapped to clip.cpp's (substring, first occurrence, in this order). */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  ["v.patch_embedding", "v.patch_embd"],
  ["v.position_embedding", "v.position_embd"],
  ["v.post_layernorm", "v.post_ln"],
  [".layer_norm1", ".ln1"],
  [".layer_norm2", ".ln2"],
  [".attn_output", ".attn_out"],
  // The reference uses the legacy swapped names (fc1 -> ffn_down), which clip.cpp swaps
  // back for gemma3 only. llama.cpp's converter writes fc1 as ffn_up; so do we, so the
  // file is the native one and needs no swap (clip.cpp swaps only when ffn_down.ne[0] == n_embd).
  [".mlp.fc1", ".ffn_up"],
  [".mlp.fc2", ".ffn_down"],
  ["mm.mm_input_projection", "mm.input_projection"],
  ["mm.mm_soft_emb_norm", "mm.soft_emb_norm"],
];

/** Gemma 3 4B/12B/27B: the SigLIP tower and the gemma3 projector inline with the text model. */
export const gemma3Clip: Handler = {
  name: "gemma3-clip",
  arch: "gemma3",
  detect: embeddedVision,
  apply(t) {
    t.copyKv("gemma3.vision.block_count", "clip.vision.block_count");
    t.copyKv("gemma3.vision.embedding_length", "clip.vision.embedding_length");
    t.copyKv("gemma3.vision.feed_forward_length", "clip.vision.feed_forward_length");
    t.copyKv("gemma3.vision.image_size", "clip.vision.image_size");
    t.copyKv("gemma3.vision.patch_size", "clip.vision.patch_size");
    t.copyKv("gemma3.vision.attention.head_count", "clip.vision.attention.head_count");
    t.copyKv("gemma3.vision.attention.layer_norm_epsilon", "clip.vision.attention.layer_norm_epsilon");
    t.copyKv("gemma3.embedding_length", "clip.vision.projection_dim");
    t.injectF32Array("clip.vision.image_mean", [0.5, 0.5, 0.5]);
    t.injectF32Array("clip.vision.image_std", [0.5, 0.5, 0.5]);
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_gelu", true);
    t.setString("clip.projector_type", "gemma3");
    for (const [from, to] of RENAMES) t.renameTensorsContaining(from, to);
    // llama.cpp's converter forces both to F32; Ollama stored them F16.
    promoteF16ToF32(t, "v.patch_embd.weight");
    promoteF16ToF32(t, "v.position_embd.weight");
    widenBf16ForCpu(t, "gemma3-clip", { "v.patch_embd.weight": "conv", "v.position_embd.weight": "add" });
    asMmproj(t);
  },
};
