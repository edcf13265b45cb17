import { GgmlType } from "@compat/gguf";
import { joinQkv, promoteF16ToF32, u32Kv, type Handler, type Translation } from "@compat/handlers";
import { permute, resamplePositionGrid, toF32 } from "@compat/tensor-ops";
import { asMmproj, embeddedVision } from "../tower";

const P = "nemotron_h_omni.";

/** Keys copied from nemotron_h_omni.vision.* to clip.vision.* with their type (not read by clip.cpp, kept as the reference does). */
const EXTRA_VISION_KEYS = ["image_token_id", "image_start_token_id", "image_end_token_id", "max_tiles", "min_num_patches", "max_num_patches"];

/** RADIO's CLIP normalization, the reference's fallback when the file has none. */
const CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD = [0.26862954, 0.26130258, 0.27577711];

/**
 * Nemotron Nano VL / Nemotron 3 Nano Omni: the RADIO ViT and the mlp1 projector inline
 * (projector nemotron_v2_vl). The audio tower (Parakeet, a.* / mm.a.*) is not served:
 * llama.cpp's converter has no mmproj for it, so the view says has_audio_encoder = false
 * and leaves those tensors out.
 */
export const nemotronHOmniClip: Handler = {
  name: "nemotron_h_omni-clip",
  arch: "nemotron_h_omni",
  detect: embeddedVision,
  apply(t) {
    for (const k of ["block_count", "embedding_length", "feed_forward_length", "attention.head_count", "attention.layer_norm_epsilon", "patch_size", "image_size", "num_channels", "projector.scale_factor", "image_mean", "image_std", ...EXTRA_VISION_KEYS]) {
      t.copyKv(`${P}vision.${k}`, `clip.vision.${k}`);
    }
    t.copyKv(`${P}embedding_length`, "clip.vision.projection_dim");

    const imageSize = u32Kv(t.draft, "clip.vision.image_size") ?? 512;
    const patchSize = u32Kv(t.draft, "clip.vision.patch_size") ?? 16;
    const embedding = u32Kv(t.draft, "clip.vision.embedding_length") ?? 1280;
    const channels = u32Kv(t.draft, "clip.vision.num_channels") ?? 3;
    const targetSide = patchSize > 0 ? Math.floor(imageSize / patchSize) : 0;

    // RADIO v2.5-h, what the reference assumes when Ollama's file lacks a key
    t.injectU32("clip.vision.block_count", 32);
    t.injectU32("clip.vision.embedding_length", embedding);
    t.injectU32("clip.vision.feed_forward_length", embedding * 4);
    t.injectU32("clip.vision.attention.head_count", 16);
    t.injectF32("clip.vision.attention.layer_norm_epsilon", 1e-6);
    t.injectU32("clip.vision.patch_size", patchSize);
    t.injectU32("clip.vision.image_size", imageSize);
    t.injectU32("clip.vision.num_channels", channels);
    t.injectU32("clip.vision.projector.scale_factor", 2);
    t.injectF32Array("clip.vision.image_mean", CLIP_MEAN);
    t.injectF32Array("clip.vision.image_std", CLIP_STD);
    t.injectBool("clip.has_vision_encoder", true);
    // llama.cpp's converter writes the vision-only form, clip.projector_type; the reference the
    // mixed-modality key. clip.cpp reads the first and falls back to the second: both are set.
    t.setString("clip.projector_type", "nemotron_v2_vl");
    t.setString("clip.vision.projector_type", "nemotron_v2_vl");
    t.injectBool("clip.use_gelu", true);
    // audio is not supported: no audio context, and the Parakeet tensors stay out of the mmproj
    t.setBool("clip.has_audio_encoder", false);
    t.hide("a.");
    t.hide("mm.a.");

    t.renameTensor("v.cls_embd", "v.class_embd");
    promoteF16ToF32(t, "v.class_embd");
    resamplePositions(t, embedding, targetSide);
    reshapePatchEmbedding(t, patchSize, channels, embedding);
    fuseQkv(t);

    t.renameTensor("mm.norm.weight", "mm.model.mlp.0.weight");
    t.renameTensor("mm.1.weight", "mm.model.mlp.1.weight");
    t.renameTensor("mm.2.weight", "mm.model.mlp.3.weight");
    asMmproj(t);
  },
};

const isSquare = (n: number) => Number.isInteger(Math.sqrt(n)) && n > 0;

/**
 * RADIO stores pos_embed at its largest resolution; llama.cpp's converter resamples it
 * (bilinear, align corners) to image_size / patch_size per side, as clip.cpp adds it to the
 * patches unchanged. Output [embedding, side*side, 1] F32, the converter's shape.
 * Layout: ggml [embedding, positions] (Ollama's), or [positions, embedding] transposed.
 */
function resamplePositions(t: Translation, embedding: number, targetSide: number): void {
  const name = t.draft.hasTensor("v.position_embd") ? "v.position_embd" : "v.position_embd.weight";
  const src = t.draft.findTensor(name);
  if (src === undefined || targetSide === 0) return;
  const dims = src.shape.filter((d) => d !== 1);
  if (dims.length !== 2) return;
  const [a, b] = [dims[0]!, dims[1]!];
  const transposed = !(a === embedding && isSquare(b)) && b === embedding && isSquare(a);
  if (!transposed && !(a === embedding && isSquare(b))) return;
  const positions = transposed ? a : b;
  const side = Math.sqrt(positions);
  t.renameTensor(name, "v.position_embd.weight");
  t.op("v.position_embd.weight", {
    label: `bilinear align-corners resample ${side}x${side} -> ${targetSide}x${targetSide}`,
    inputs: ["v.position_embd.weight"],
    type: GgmlType.F32,
    shape: [embedding, targetSide * targetSide, 1],
    compute: ([x]) => {
      let grid = toF32(x!.type, x!.bytes, embedding * positions);
      if (transposed) {
        const bytes = new Uint8Array(grid.buffer, grid.byteOffset, grid.byteLength);
        const p = permute({ data: bytes, shape: [positions, embedding] }, GgmlType.F32, [1, 0]).data;
        grid = new Float32Array(p.buffer.slice(p.byteOffset, p.byteOffset + p.byteLength));
      }
      const out = resamplePositionGrid(grid, { embedding, srcHeight: side, srcWidth: side, dstHeight: targetSide, dstWidth: targetSide });
      return new Uint8Array(out.buffer);
    },
  });
}

/**
 * RADIO's patch embedder is a linear layer over (channel, y, x)-flattened patches; clip.cpp
 * runs it as a convolution [patch, patch, channels, embedding]. Same element order, so the
 * bytes stay: only the shape changes, and the type stays (F16, as the converter writes it
 * for f16 output; the reference promotes to F32).
 */
function reshapePatchEmbedding(t: Translation, patch: number, channels: number, embedding: number): void {
  const w = t.draft.findTensor("v.patch_embd.weight");
  if (w === undefined || w.shape.length !== 2 || w.shape[0] !== patch * patch * channels || w.shape[1] !== embedding) return;
  t.reshape("v.patch_embd.weight", [patch, patch, channels, embedding]);
}

/**
 * Ollama split RADIO's fused attn.qkv into attn_q/k/v; llama.cpp's converter keeps it fused
 * (v.blk.N.attn_qkv). Left split when the parts differ in type (clip.cpp also runs split Q/K/V).
 */
function fuseQkv(t: Translation): void {
  for (let b = 0; t.draft.hasTensor(`v.blk.${b}.attn_q.weight`); b++) joinQkv(t, `v.blk.${b}.`, { mixed: "split", what: "attn_q+attn_k+attn_v" });
}
