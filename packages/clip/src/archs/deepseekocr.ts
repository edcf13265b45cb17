import { promoteF16ToF32, tensorNames, u32Kv, type Handler, type Translation } from "@compat/handlers";
import { asMmproj, embeddedVision, widenBf16ForCpu } from "../tower";

/** Ollama's SAM / CLIP / projector names, mapped to clip.cpp's (substring, first occurrence, in this order). */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  // CLIP blocks
  [".self_attn.out_proj", ".attn_out"],
  [".self_attn.qkv_proj", ".attn_qkv"],
  [".layer_norm1", ".ln1"],
  [".layer_norm2", ".ln2"],
  [".mlp.fc1", ".ffn_up"],
  [".mlp.fc2", ".ffn_down"],
  ["v.pre_layrnorm", "v.pre_ln"], // Ollama's (and the checkpoint's) spelling
  // SAM blocks, once under v.sam.
  [".attn.proj", ".attn.out"],
  [".attn.rel_pos_h", ".attn.pos_h.weight"],
  [".attn.rel_pos_w", ".attn.pos_w.weight"],
  [".norm1", ".pre_ln"],
  [".norm2", ".post_ln"],
  // projector and the two learned separators
  ["mm.layers", "mm.model.fc"],
  ["mm.image_newline", "v.image_newline"],
  ["mm.view_seperator", "v.view_seperator"], // sic, as clip.cpp spells it
];

/**
 * The reference hard-codes these from DeepSeek-OCR itself: llama.cpp's converter writes
 * feed_forward_length as CLIP heads * 4 (16 * 4) and projection_dim as the text width
 * (1280). clip.cpp does not use either for this projector (the output width comes from
 * mm.model.fc), so the native profile's fixes below only make the keys say the truth.
 */
const DEEPSEEK_OCR_FF = 64;
const DEEPSEEK_OCR_TEXT_WIDTH = 1280;

/** The values llama.cpp's converter (DeepseekOCRVisionModel) would write, from the file's own keys. */
function fixSizes(t: Translation): void {
  const heads = u32Kv(t.draft, "deepseekocr.vision.head_count");
  t.fix({
    name: "deepseekocr-clip-feed-forward-length",
    reason: `the reference writes clip.vision.feed_forward_length ${DEEPSEEK_OCR_FF} (DeepSeek-OCR's 16 CLIP heads * 4) whatever the file holds; llama.cpp's converter writes the CLIP head count * 4 (its get_vision_config), read here from deepseekocr.vision.head_count`,
    needed: () => heads !== undefined && heads > 0 && u32Kv(t.draft, "clip.vision.feed_forward_length") !== heads * 4,
    apply: () => t.setU32("clip.vision.feed_forward_length", heads! * 4),
  });
  const width = u32Kv(t.draft, "deepseekocr.embedding_length");
  t.fix({
    name: "deepseekocr-clip-projection-dim",
    reason: `the reference writes clip.vision.projection_dim ${DEEPSEEK_OCR_TEXT_WIDTH} (DeepSeek-OCR's text width) whatever the file holds; llama.cpp's converter writes the text model's hidden size, read here from deepseekocr.embedding_length`,
    needed: () => width !== undefined && width > 0 && u32Kv(t.draft, "clip.vision.projection_dim") !== width,
    apply: () => t.setU32("clip.vision.projection_dim", width!),
  });
}

/** SAM's convolutions (patch embedding, neck, the two downsamplers), under clip.cpp's names. */
const SAM_CONVS = ["v.sam.patch_embd.weight", "v.sam.neck.0.weight", "v.sam.neck.2.weight", "v.sam.net_2.weight", "v.sam.net_3.weight"];

/**
 * DeepSeek-OCR: a SAM-ViT-B encoder (Ollama: s.*), a CLIP-L tower (v.*) and a linear
 * projector (mm.*) inline. llama.cpp's clip.cpp wants SAM under v.sam.*.
 */
export const deepseekocrClip: Handler = {
  name: "deepseekocr-clip",
  arch: "deepseekocr",
  detect: embeddedVision,
  apply(t) {
    t.copyKv("deepseekocr.vision.block_count", "clip.vision.block_count");
    t.copyKv("deepseekocr.vision.embedding_length", "clip.vision.embedding_length");
    t.copyKv("deepseekocr.vision.head_count", "clip.vision.attention.head_count");
    t.copyKv("deepseekocr.vision.image_size", "clip.vision.image_size");
    t.copyKv("deepseekocr.vision.patch_size", "clip.vision.patch_size");
    t.copyKv("deepseekocr.sam.block_count", "clip.vision.sam.block_count");
    t.copyKv("deepseekocr.sam.embedding_length", "clip.vision.sam.embedding_length");
    t.copyKv("deepseekocr.sam.head_count", "clip.vision.sam.head_count");
    t.injectU32("clip.vision.feed_forward_length", DEEPSEEK_OCR_FF);
    t.injectU32("clip.vision.projection_dim", DEEPSEEK_OCR_TEXT_WIDTH);
    fixSizes(t);
    t.injectU32("clip.vision.projector.scale_factor", 1);
    t.injectU32("clip.vision.window_size", 14);
    t.injectF32("clip.vision.attention.layer_norm_epsilon", 1e-6);
    t.injectF32Array("clip.vision.image_mean", [0.5, 0.5, 0.5]);
    t.injectF32Array("clip.vision.image_std", [0.5, 0.5, 0.5]);
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_gelu", true);
    t.setString("clip.projector_type", "deepseekocr");

    // SAM: a prefix swap (a substring rename of "s." would also hit e.g. "mm.layers.weight")
    for (const name of tensorNames(t.draft)) if (name.startsWith("s.")) t.renameTensor(name, "v.sam." + name.slice(2));
    t.renameTensor("v.sam.position_embd", "v.sam.pos_embd.weight");
    for (const [from, to] of RENAMES) t.renameTensorsContaining(from, to);

    // llama.cpp's converter forces these F32 (its tensor_force_quant list: the CLIP
    // embeddings, SAM's neck and net_2/net_3 convolutions); Ollama stored the matrices F16.
    // The reference promotes only the CLIP patch and position embeddings.
    for (const name of ["v.patch_embd.weight", "v.position_embd.weight", "v.sam.neck.0.weight", "v.sam.neck.2.weight", "v.sam.net_2.weight", "v.sam.net_3.weight"]) {
      promoteF16ToF32(t, name);
    }
    // Not v.sam.patch_embd.weight (the reference promotes it): the converter writes it F16
    // for f16 output and clip.cpp runs it as it is.
    // The converter stores view_seperator as [n, 1] (same bytes as Ollama's [n]).
    const sep = t.draft.findTensor("v.view_seperator");
    if (sep?.shape.length === 1) t.reshape("v.view_seperator", [sep.shape[0]!, 1]);
    widenBf16ForCpu(t, "deepseekocr-clip", Object.fromEntries(SAM_CONVS.map((n) => [n, "conv"] as const)));
    asMmproj(t);
  },
};
