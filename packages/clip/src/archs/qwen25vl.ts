import { intArrayKv, type Handler } from "@compat/handlers";
import { asMmproj, embeddedVision, widenBf16ForCpu } from "../tower";

/** CLIP's normalization, as Qwen2.5-VL's preprocessor_config.json gives it. */
const CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD = [0.26862954, 0.26130258, 0.27577711];

/** Ollama's names for the merger and the two time slices of the patch conv, mapped to clip.cpp's. */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  ["v.merger.ln_q.weight", "v.post_ln.weight"],
  ["v.merger.mlp.0.weight", "mm.0.weight"],
  ["v.merger.mlp.0.bias", "mm.0.bias"],
  ["v.merger.mlp.2.weight", "mm.2.weight"],
  ["v.merger.mlp.2.bias", "mm.2.bias"],
  ["v.patch_embd_0.weight", "v.patch_embd.weight"],
  ["v.patch_embd_1.weight", "v.patch_embd.weight.1"],
];

/**
 * Qwen2.5-VL: the windowed-attention ViT and the patch merger inline. Ollama already
 * split the fused QKV and the Conv3D as llama.cpp's converter does, so this is keys
 * and renames only.
 */
export const qwen25vlClip: Handler = {
  name: "qwen25vl-clip",
  arch: "qwen25vl",
  detect: embeddedVision,
  apply(t) {
    for (const k of ["attention.head_count", "attention.layer_norm_epsilon", "block_count", "embedding_length", "num_channels", "patch_size", "spatial_merge_size", "window_size"]) {
      t.copyKv(`qwen25vl.vision.${k}`, `clip.vision.${k}`);
    }
    t.copyKv("qwen25vl.embedding_length", "clip.vision.projection_dim");
    const up = t.draft.findTensor("v.blk.0.ffn_up.weight");
    if (up?.shape[1] !== undefined) t.injectU32("clip.vision.feed_forward_length", up.shape[1]);
    // clip.cpp requires the window-attention period: llama.cpp's converter takes it from
    // the first full-attention block, as here; 8 (every Qwen2.5-VL's) when the key is missing
    const full = intArrayKv(t.draft, "qwen25vl.vision.fullatt_block_indexes")?.[0];
    if (full !== undefined && full >= 0) t.setU32("clip.vision.n_wa_pattern", full + 1);
    t.injectU32("clip.vision.n_wa_pattern", 8);
    // the config has no image_size: 560 is the converter's (and the reference's) default
    t.injectU32("clip.vision.image_size", 560);
    t.injectF32Array("clip.vision.image_mean", CLIP_MEAN);
    t.injectF32Array("clip.vision.image_std", CLIP_STD);
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_silu", true);
    t.setString("clip.projector_type", "qwen2.5vl_merger");
    for (const [from, to] of RENAMES) t.renameTensor(from, to);
    // No F16->F32 promote of the two patch embeddings (the reference does one): llama.cpp's
    // converter writes them F16 for f16 output and current clip.cpp runs them as they are.
    widenBf16ForCpu(t, "qwen25vl-clip", { "v.patch_embd.weight": "conv", "v.patch_embd.weight.1": "conv" });
    asMmproj(t);
  },
};

