import { tensorByteSize } from "@compat/gguf";
import { interleaveExperts } from "@compat/tensor-ops";
import { anyOf, hasTensorPrefix, stringKv } from "../detect";
import type { Handler } from "../handler";
import type { Translation } from "../translation";

/** Tensor prefixes of the towers and projectors Ollama kept inline; the clip view serves them. */
const TOWER_PREFIXES = ["a.", "v.", "mm.", "model.vision_tower."] as const;

/**
 * Gemma 4 as Ollama published it: a SentencePiece tokenizer name over what is a BPE
 * vocabulary (Ollama wrote the merges and the gemma4 pre-tokenizer), the vision and
 * audio towers inline, and in MoE files the experts' gate and up split with the router's
 * per-expert scale under its own name. llama.cpp also loads split experts, but the
 * reference fuses them (gate rows then up rows per expert) unless per-expert scale
 * side-cars would then be left unclaimed.
 */
export const gemma4: Handler = {
  name: "gemma4",
  arch: "gemma4",
  detect(m) {
    return anyOf(
      ...TOWER_PREFIXES.map((p) => hasTensorPrefix(m, p) && `embedded tensors ${p}*`),
      stringKv(m, "tokenizer.ggml.model") === "llama" && "tokenizer.ggml.model llama",
    );
  },
  apply(t) {
    if (t.getString("tokenizer.ggml.model") === "llama") t.setString("tokenizer.ggml.model", "gemma4");
    for (const p of TOWER_PREFIXES) t.hide(p);
    for (const b of t.blocksWithTensors(t.getU32("gemma4.block_count") ?? 0)) {
      if (!hasExpertSidecars(t, b)) fuseGateUp(t, b);
      t.renameTensor(`blk.${b}.ffn_gate_inp.per_expert_scale`, `blk.${b}.ffn_down_exps.scale`);
    }
  },
};

/** Per-expert scales of gate or up: a fused tensor would leave them unclaimed. */
function hasExpertSidecars(t: Translation, b: number): boolean {
  return ["ffn_gate_exps.scale", "ffn_gate_exps.input_scale", "ffn_up_exps.scale", "ffn_up_exps.input_scale"].some((s) => t.hasTensor(`blk.${b}.${s}`));
}

/** ffn_gate_exps + ffn_up_exps -> ffn_gate_up_exps [n_embd, 2*n_ff, n_expert], under the reference's conditions. */
function fuseGateUp(t: Translation, b: number): void {
  const gateName = `blk.${b}.ffn_gate_exps.weight`;
  const upName = `blk.${b}.ffn_up_exps.weight`;
  const fusedName = `blk.${b}.ffn_gate_up_exps.weight`;
  const gate = t.tensor(gateName);
  const up = t.tensor(upName);
  if (gate === undefined || up === undefined || t.hasTensor(fusedName) || gate.type !== up.type) return;
  const ne = (shape: readonly number[], i: number) => shape[i] ?? 1;
  if ([0, 1, 2].some((i) => ne(gate.shape, i) !== ne(up.shape, i))) return;
  const [nEmbd, nFf, nExpert] = [ne(gate.shape, 0), ne(gate.shape, 1), ne(gate.shape, 2)];
  if (nExpert <= 0 || ne(gate.shape, 3) !== 1) return;
  const bytes = tensorByteSize(gate.type, gate.shape);
  if (bytes !== tensorByteSize(up.type, up.shape) || bytes % nExpert !== 0) return;
  const type = gate.type;
  const shape = [nEmbd, 2 * nFf, nExpert];
  // renamed in place first (the fused tensor takes the gate's slot), then its bytes are computed from both
  t.renameTensor(gateName, fusedName);
  t.op(fusedName, {
    label: "gemma4 MoE gate/up interleave",
    inputs: [fusedName, upName],
    type,
    shape,
    compute: ([g, u]) => interleaveExperts({ data: g!.bytes, shape: [nEmbd, nFf, nExpert] }, { data: u!.bytes, shape: [nEmbd, nFf, nExpert] }, type).data,
  });
  t.hide(upName);
}
