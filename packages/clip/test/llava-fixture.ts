import { GgmlType, GgufModel, GgufValueType } from "@compat/gguf";

/** The text model the projector feeds: the native llama fixture (n_embd 16). */
const TEXT_EMBD = 16;
const V = { n_embd: 32, n_head: 2, n_ff: 64, n_layer: 2, image_size: 32, patch_size: 8, mm_hidden: 24 } as const;

/** Small deterministic F32 values (weights) or ones (norm scales). */
function values(n: number, seed: number, ones = false): Uint8Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = ones ? 1 : 0.05 * Math.sin(i * 0.37 + seed * 1.3);
  return new Uint8Array(a.buffer);
}

/**
 * A separate LLaVA-1.5-style projector blob as old Ollama llava models carry it
 * (clip_image_encoder_to_gguf's layout): a CLIP ViT under v.*, the two-layer MLP as
 * mm.0 / mm.2, and no clip.projector_type. `extra` lets a test add keys.
 */
export function llavaProjector(extra: (m: GgufModel) => void = () => {}): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "clip");
  m.setString("general.name", "Fixture LLaVA projector");
  m.setBool("clip.has_text_encoder", false);
  m.setBool("clip.has_vision_encoder", true);
  m.setBool("clip.has_llava_projector", true);
  m.setU32("general.file_type", 0);
  m.setU32("clip.vision.image_size", V.image_size);
  m.setU32("clip.vision.patch_size", V.patch_size);
  m.setU32("clip.vision.embedding_length", V.n_embd);
  m.setU32("clip.vision.feed_forward_length", V.n_ff);
  m.setU32("clip.vision.projection_dim", TEXT_EMBD);
  m.setU32("clip.vision.attention.head_count", V.n_head);
  m.setF32("clip.vision.attention.layer_norm_epsilon", 1e-5);
  m.setU32("clip.vision.block_count", V.n_layer);
  m.setArray("clip.vision.image_mean", GgufValueType.FLOAT32, [0.48145466, 0.4578275, 0.40821073]);
  m.setArray("clip.vision.image_std", GgufValueType.FLOAT32, [0.26862954, 0.26130258, 0.27577711]);
  m.setBool("clip.use_gelu", false);
  extra(m);
  let seed = 0;
  const add = (name: string, shape: number[], ones = false) => {
    const n = shape.reduce((a, b) => a * b, 1);
    m.addTensor({ name, type: GgmlType.F32, shape, data: { kind: "bytes", bytes: values(n, ++seed, ones) } });
  };
  const { n_embd: E, n_ff: F, patch_size: P, mm_hidden: H } = V;
  add("mm.0.weight", [E, H]);
  add("mm.0.bias", [H]);
  add("mm.2.weight", [H, TEXT_EMBD]);
  add("mm.2.bias", [TEXT_EMBD]);
  add("v.class_embd", [E]);
  add("v.patch_embd.weight", [P, P, 3, E]);
  add("v.position_embd.weight", [E, (V.image_size / P) ** 2 + 1]);
  add("v.pre_ln.weight", [E], true);
  add("v.pre_ln.bias", [E]);
  for (let b = 0; b < V.n_layer; b++) {
    const p = `v.blk.${b}.`;
    for (const x of ["attn_q", "attn_k", "attn_v", "attn_out"]) {
      add(`${p}${x}.weight`, [E, E]);
      add(`${p}${x}.bias`, [E]);
    }
    add(`${p}ln1.weight`, [E], true);
    add(`${p}ln1.bias`, [E]);
    add(`${p}ln2.weight`, [E], true);
    add(`${p}ln2.bias`, [E]);
    add(`${p}ffn_up.weight`, [E, F]);
    add(`${p}ffn_up.bias`, [F]);
    add(`${p}ffn_down.weight`, [F, E]);
    add(`${p}ffn_down.bias`, [E]);
  }
  // a tensor outside v./mm. (LLaVA 1.6 projectors carry one): the default must not drop it
  add("model.image_newline", [E]);
  return m;
}

