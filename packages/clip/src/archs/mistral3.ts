import { GgmlType, GgufValueType } from "@compat/gguf";
import { arrayKv, blocksWithTensors, permuteQKRows, rowAsF32Tensor, TranslationError, u32Kv, type Handler, type Translation } from "@compat/handlers";
import { zeros } from "@compat/tensor-ops";
import { asMmproj, embeddedVision, widenBf16ForCpu } from "../tower";

/** Ollama's Pixtral names, mapped to clip.cpp's (substring, first occurrence, in this order). */
const RENAMES: ReadonlyArray<readonly [string, string]> = [
  ["v.patch_conv", "v.patch_embd"],
  ["v.encoder_norm", "v.pre_ln"],
  [".attn_output", ".attn_out"],
  [".attn_norm", ".ln1"],
  [".ffn_norm", ".ln2"],
  ["mm.linear_1", "mm.1"],
  ["mm.linear_2", "mm.2"],
  ["mm.patch_merger.merging_layer", "mm.patch_merger"],
  ["mm.norm", "mm.input_norm"],
];

/** CLIP's normalization, as Pixtral's preprocessor_config.json gives it (and llama.cpp's mmproj stores it). */
const PIXTRAL_MEAN = [0.48145466, 0.4578275, 0.40821073];
const PIXTRAL_STD = [0.26862954, 0.26130258, 0.27577711];

const IMG_BREAK = "v.token_embd.img_break";

/**
 * Mistral Small 3.x: the Pixtral tower and patch-merger projector inline. Ollama's writer
 * RoPE-permuted the text Q/K but left the vision Q/K in Hugging Face order.
 */
export const mistral3Clip: Handler = {
  name: "mistral3-clip",
  arch: "mistral3",
  detect: embeddedVision,
  apply(t) {
    t.copyKv("mistral3.vision.block_count", "clip.vision.block_count");
    t.copyKv("mistral3.vision.embedding_length", "clip.vision.embedding_length");
    t.copyKv("mistral3.vision.feed_forward_length", "clip.vision.feed_forward_length");
    t.copyKv("mistral3.vision.attention.head_count", "clip.vision.attention.head_count");
    t.copyKv("mistral3.vision.image_size", "clip.vision.image_size");
    t.copyKv("mistral3.vision.patch_size", "clip.vision.patch_size");
    t.copyKv("mistral3.vision.num_channels", "clip.vision.num_channels");
    t.copyKv("mistral3.spatial_merge_size", "clip.vision.spatial_merge_size");
    // not read by clip.cpp (Pixtral's vision RoPE theta is fixed there), kept for completeness
    t.copyKv("mistral3.vision.rope.freq_base", "clip.rope.freq_base");
    t.copyKv("mistral3.embedding_length", "clip.vision.projection_dim");
    t.injectF32("clip.vision.attention.layer_norm_epsilon", 1e-5);
    t.injectF32Array("clip.vision.image_mean", PIXTRAL_MEAN);
    t.injectF32Array("clip.vision.image_std", PIXTRAL_STD);
    t.injectBool("clip.has_vision_encoder", true);
    t.injectBool("clip.use_silu", true);
    t.setString("clip.projector_type", "pixtral");

    addImageBreak(t);

    permuteVisionQK(t);

    for (const [from, to] of RENAMES) t.renameTensorsContaining(from, to);
    // No F16->F32 promote of v.patch_embd.weight (the reference does one): llama.cpp's own
    // converter writes it F16 for f16 output and current clip.cpp runs it as it is.
    widenBf16ForCpu(t, "mistral3-clip", { "v.patch_embd.weight": "conv" });
    asMmproj(t);
  },
};

/**
 * Pixtral's vision Q/K from Hugging Face's rotate-half order to the pairs llama.cpp's RoPE
 * expects. The reference permutes them only when they are F16 and passes any other type on
 * in the wrong order; the permutation moves whole rows, so under `native` every type takes
 * it (the fix below; Ollama wrote BF16 towers in Aug-Sep 2025, and Q/K are never quantized).
 */
function permuteVisionQK(t: Translation): void {
  const nHead = u32Kv(t.draft, "mistral3.vision.attention.head_count");
  const nBlock = u32Kv(t.draft, "mistral3.vision.block_count");
  if (nHead === undefined || nBlock === undefined) return;
  const names = blocksWithTensors(t.draft, nBlock, "v.blk.").flatMap((b) => [`v.blk.${b}.attn_q.weight`, `v.blk.${b}.attn_k.weight`]);
  const isF16 = (n: string) => t.draft.findTensor(n)?.type === GgmlType.F16;
  let anyType = false;
  t.fix({
    name: "mistral3-clip-permute-qk-any-type",
    reason:
      "the reference RoPE-permutes Pixtral's vision Q/K only when they are F16 and leaves other types (a BF16 tower) in Hugging Face's rotate-half order, so clip.cpp's 2-D RoPE rotates the wrong pairs; the permutation moves whole rows, so any type takes it, as llama.cpp's converter applies it",
    needed: () => names.some((n) => t.draft.hasTensor(n) && !isF16(n)),
    apply: () => {
      anyType = true;
    },
  });
  for (const name of names) if (isF16(name) || anyType) permuteQKRows(t, name, nHead);
}

/**
 * clip.cpp requires the [IMG_BREAK] token's embedding, which llama.cpp's converter copies
 * out of the text embedding matrix. Ollama's file still has that matrix, so take the row;
 * the reference writes zeros instead (a row break that adds nothing), which stays the
 * fallback when the vocabulary has no [IMG_BREAK].
 */
function addImageBreak(t: Translation): void {
  const embd = t.draft.findTensor("token_embd.weight");
  // The row is as wide as the text embedding (else the projector's output). The key must
  // agree: a hostile mistral3.embedding_length of 2^31-1 once sized an 8 GiB zero row.
  const declared = u32Kv(t.draft, "mistral3.embedding_length");
  const width = embd?.shape[0] ?? t.draft.findTensor("mm.linear_2.weight")?.shape[1];
  if (width === undefined || width === 0) return;
  if (declared !== undefined && declared !== width) {
    throw new TranslationError("BAD_COUNT", `mistral3.embedding_length is ${declared} but the text embedding is ${width} wide`);
  }
  const id = tokenId(t, "[IMG_BREAK]");
  if (embd !== undefined && id !== undefined) {
    rowAsF32Tensor(t, IMG_BREAK, "token_embd.weight", id);
    if (t.draft.hasTensor(IMG_BREAK)) return;
  }
  t.op(IMG_BREAK, {
    label: "zero-fill (no [IMG_BREAK] row to copy)",
    inputs: [],
    type: GgmlType.F32,
    shape: [width],
    compute: () => zeros([width], GgmlType.F32).data,
  });
}

function tokenId(t: Translation, text: string): number | undefined {
  const tokens = arrayKv(t.draft, "tokenizer.ggml.tokens");
  if (tokens?.itemType !== GgufValueType.STRING) return undefined;
  for (let i = 0; i < tokens.length; i++) if (tokens.at(i) === text) return i;
  return undefined;
}
