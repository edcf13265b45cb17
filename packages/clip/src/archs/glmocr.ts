import type { Handler } from "@compat/handlers";
import { asMmproj, embeddedVision, widenBf16ForCpu } from "../tower";

/**
 * GLM-OCR: a GLM-4V-style tower (RMS-normed blocks with Q/K norms, fused QKV) and the glm4v
 * merger inline. Ollama's converter already used clip.cpp's names for everything but the two
 * time halves of the 3-D patch convolution.
 */
export const glmocrClip: Handler = {
  name: "glmocr-clip",
  arch: "glmocr",
  detect: embeddedVision,
  apply(t) {
    t.copyKv("glmocr.vision.block_count", "clip.vision.block_count");
    t.copyKv("glmocr.vision.embedding_length", "clip.vision.embedding_length");
    t.copyKv("glmocr.vision.intermediate_size", "clip.vision.feed_forward_length");
    t.copyKv("glmocr.vision.attention.head_count", "clip.vision.attention.head_count");
    t.copyKv("glmocr.vision.attention.layer_norm_rms_epsilon", "clip.vision.attention.layer_norm_epsilon");
    t.copyKv("glmocr.vision.image_size", "clip.vision.image_size");
    t.copyKv("glmocr.vision.patch_size", "clip.vision.patch_size");
    // not written by llama.cpp's converter (clip.cpp defaults glm4v to 2), read when present
    t.copyKv("glmocr.vision.spatial_merge_size", "clip.vision.spatial_merge_size");
    t.copyKv("glmocr.vision.out_hidden_size", "clip.vision.projection_dim");
    t.copyKv("glmocr.vision.image_mean", "clip.vision.image_mean");
    t.copyKv("glmocr.vision.image_std", "clip.vision.image_std");
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_silu", true);
    t.setString("clip.projector_type", "glm4v");
    t.renameTensor("v.patch_embd_0.weight", "v.patch_embd.weight");
    t.renameTensor("v.patch_embd_1.weight", "v.patch_embd.weight.1");
    // No F16->F32 promote of the two halves (the reference does one): llama.cpp's converter
    // writes them F16 for f16 output (tensor_force_quant) and clip.cpp runs them as they are.
    widenBf16ForCpu(t, "glmocr-clip", { "v.patch_embd.weight": "conv", "v.patch_embd.weight.1": "conv", "mm.patch_merger.weight": "conv" });
    asMmproj(t);
  },
};
