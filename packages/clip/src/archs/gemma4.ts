import { blocksWithTensors, hasTensorPrefix, promoteF16ToF32, u32Kv, type Handler, type Translation } from "@compat/handlers";
import { asMmproj, embeddedVision } from "../tower";

/**
 * Gemma 4: the vision tower (gemma4v projector) and, in the small dense models, the
 * audio conformer (gemma4a projector) inline with the text model. Ollama's converter
 * already wrote the vision tensors under llama.cpp's mmproj names; six audio names differ.
 * One mmproj holds both towers, each with its own projector type, as llama.cpp's
 * converter writes it.
 */
export const gemma4Clip: Handler = {
  name: "gemma4-clip",
  arch: "gemma4",
  detect: embeddedVision,
  apply(t) {
    if (hasTensorPrefix(t.draft, "v.")) vision(t);
    if (hasTensorPrefix(t.draft, "a.")) {
      // clip.cpp takes gemma4a's output width from this tensor's rows and would dereference
      // nothing without it: such a file's audio tower is left out (vision still served)
      if (t.draft.hasTensor(AUDIO_EMBEDDER)) audio(t);
      else for (const p of ["a.", "mm.a."]) t.hide(p);
    }
    asMmproj(t);
  },
};

/** The audio embedder's projection into the text model's width (Ollama and llama.cpp name it alike). */
const AUDIO_EMBEDDER = "mm.a.input_projection.weight";

/** A tower's hparams, which Ollama wrote as gemma4.<tower>.<key> and clip.cpp reads as clip.<tower>.<key>. */
const TOWER_KEYS = ["block_count", "embedding_length", "feed_forward_length", "attention.head_count", "attention.layer_norm_epsilon"];

function copyTowerKvs(t: Translation, tower: "vision" | "audio"): void {
  for (const key of TOWER_KEYS) t.copyKv(`gemma4.${tower}.${key}`, `clip.${tower}.${key}`);
}

function vision(t: Translation): void {
  copyTowerKvs(t, "vision");
  t.copyKv("gemma4.vision.patch_size", "clip.vision.patch_size");
  // required by clip.cpp but unused for gemma4v (images are resized by token budget); the converter writes 224
  t.injectU32("clip.vision.image_size", 224);
  t.copyKv("gemma4.embedding_length", "clip.vision.projection_dim");
  // no normalization in preprocessing: clip.cpp's gemma4v graph maps the [0, 1] pixels to
  // [-1, 1] itself (2x - 1), and the converter writes the preprocessor's mean 0 / std 1
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

/** The SSCP's two stride-2 convolutions divide the mel axis by 4 (rounding up). */
const SSCP_FREQ_DIVISOR = 4;
/** What the reference writes: Gemma 4's feature extractor (input_feat_size of every published audio config). */
const REFERENCE_MEL_BINS = 128;

function audio(t: Translation): void {
  // clip.cpp uses 1e-6 for gemma4a whatever the file says; the epsilon is copied for completeness, as the converter writes one
  copyTowerKvs(t, "audio");
  fixMelBins(t);
  t.injectU32("clip.audio.num_mel_bins", REFERENCE_MEL_BINS);
  // The reference needed a llama.cpp hook for gemma4a's output width (its pinned llama.cpp had
  // no gemma4a case in clip_n_mmproj_embd). Current llama.cpp reads it from the rows of
  // AUDIO_EMBEDDER, which the file holds under that very name (checked above), so the
  // projection_dim below is only what the converter writes too; nothing else is needed.
  t.copyKv("gemma4.embedding_length", "clip.audio.projection_dim");
  t.injectBool("clip.has_audio_encoder", true);
  t.setString("clip.audio.projector_type", "gemma4a");

  // Top level (in this order: the SSCP projection vacates a.pre_encode.out for the output projection).
  t.renameTensor("a.pre_encode.out.weight", "a.input_projection.weight");
  t.renameTensor("mm.a.fc.weight", "a.pre_encode.out.weight");
  t.renameTensor("mm.a.fc.bias", "a.pre_encode.out.bias");
  // llama.cpp's converter forces the SSCP input projection to F32 (its HF name sits under
  // subsample_conv_projection, which tensor_force_quant treats as a conv); Ollama stored F16.
  promoteF16ToF32(t, "a.input_projection.weight");

  // the reference assumes 12 blocks (E2B/E4B) when the key is missing
  const blocks = u32Kv(t.draft, "gemma4.audio.block_count") ?? 12;
  for (const b of blocksWithTensors(t.draft, blocks, "a.blk.")) {
    const p = `a.blk.${b}.`;
    // ln2 is vacated before layer_pre_norm (the block's output norm) takes its name
    t.renameTensor(`${p}ln1.weight`, `${p}attn_pre_norm.weight`);
    t.renameTensor(`${p}ln2.weight`, `${p}attn_post_norm.weight`);
    t.renameTensor(`${p}layer_pre_norm.weight`, `${p}ln2.weight`);
  }
  // The relative-position key projection, with any clamp scalars it has (the reference
  // renames the weight only; clip.cpp looks the scalars up under the weight's new name).
  t.renameTensorsContaining(".linear_pos.", ".attn_k_rel.");
}

/**
 * clip.audio.num_mel_bins is not in Ollama's file; the reference writes 128, right for every
 * published Gemma 4. The SSCP input projection's width (channels x mel / 4) gives it for any
 * file (the named fix, set before the reference's default), so a tower with another mel
 * count gets a filterbank that fits its weights.
 */
function fixMelBins(t: Translation): void {
  const width = t.draft.findTensor("a.pre_encode.out.weight")?.shape[0];
  const channels = t.draft.findTensor("a.conv1d.1.weight")?.shape[3];
  const derived = width !== undefined && channels !== undefined && channels > 0 && width % channels === 0 ? (width / channels) * SSCP_FREQ_DIVISOR : undefined;
  t.fix({
    name: "gemma4-clip-num-mel-bins",
    reason: `the reference writes clip.audio.num_mel_bins ${REFERENCE_MEL_BINS} (Gemma 4's feature extractor) whatever the tower holds; the SSCP input projection (a.pre_encode.out) is channels x mel / 4 wide, which gives ${derived ?? "?"} here, and llama.cpp's converter writes the checkpoint's input_feat_size`,
    needed: () => derived !== undefined && derived !== REFERENCE_MEL_BINS && !t.draft.has("clip.audio.num_mel_bins"),
    apply: () => t.setU32("clip.audio.num_mel_bins", derived!),
  });
}
