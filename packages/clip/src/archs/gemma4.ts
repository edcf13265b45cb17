import type { Handler, Translation } from "@compat/handlers";
import { asMmproj, embeddedVision } from "../tower";

/**
 * Gemma 4: the vision tower (gemma4v projector) and, in the small dense models, the
 * audio conformer (gemma4a projector) inline with the text model. Ollama's converter
 * already wrote the vision tensors under llama.cpp's mmproj names.
 */
export const gemma4Clip: Handler = {
  name: "gemma4-clip",
  arch: "gemma4",
  detect: embeddedVision,
  apply(t) {
    if (t.anyTensorWithPrefix("v.")) vision(t);
    asMmproj(t);
  },
};

function vision(t: Translation): void {
  t.copyKv("gemma4.vision.block_count", "clip.vision.block_count");
  t.copyKv("gemma4.vision.embedding_length", "clip.vision.embedding_length");
  t.copyKv("gemma4.vision.feed_forward_length", "clip.vision.feed_forward_length");
  t.copyKv("gemma4.vision.attention.head_count", "clip.vision.attention.head_count");
  t.copyKv("gemma4.vision.attention.layer_norm_epsilon", "clip.vision.attention.layer_norm_epsilon");
  t.copyKv("gemma4.vision.patch_size", "clip.vision.patch_size");
  // required by clip.cpp but unused for gemma4v (images are resized by token budget); the converter writes 224
  t.injectU32("clip.vision.image_size", 224);
  t.copyKv("gemma4.embedding_length", "clip.vision.projection_dim");
  // Gemma 4's image processor does not normalize (the tower applies v.std_bias / v.std_scale)
  t.injectF32Array("clip.vision.image_mean", [0, 0, 0]);
  t.injectF32Array("clip.vision.image_std", [1, 1, 1]);
  t.injectBool("clip.has_vision_encoder", true);
  t.setString("clip.vision.projector_type", "gemma4v");
  // Ollama's packed copy of the per-linear clamp scalars; clip.cpp reads the scalars
  // themselves (<linear>.input_min, ...), which the file also holds under llama.cpp's names.
  t.dropTensor("v.clamp_data");
  // v.patch_embd.weight stays F16 (the reference promotes it to F32 for Metal's im2col):
  // llama.cpp's converter writes it F16 for --outtype f16 and current clip.cpp runs it so.
}
