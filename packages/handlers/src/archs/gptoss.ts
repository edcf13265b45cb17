import type { Handler } from "../handler";

/**
 * Ollama named gpt-oss "gptoss", left out the expert FFN width and the YaRN type, used
 * the generic pre-tokenizer (Harmony headers then tokenize wrongly) and its own names
 * for three tensors.
 */
export const gptoss: Handler = {
  name: "gptoss",
  arch: "gptoss",
  detect: () => ["architecture gptoss"],
  apply(t) {
    t.renameArch("gptoss", "gpt-oss");
    const gateExps = t.draft.findTensor("blk.0.ffn_gate_exps.weight");
    // ffn_gate_exps is [n_embd, n_ff_exp, n_expert]: ne[1] is the per-expert width.
    if (!t.draft.has("gpt-oss.expert_feed_forward_length") && gateExps !== undefined) {
      t.setU32("gpt-oss.expert_feed_forward_length", gateExps.shape[1] ?? 1);
    }
    t.injectString("gpt-oss.rope.scaling.type", "yarn");
    t.setString("tokenizer.ggml.pre", "gpt-4o");
    t.renameTensorsContaining(".attn_out", ".attn_output");
    t.renameTensorsContaining(".attn_sinks", ".attn_sinks.weight");
    t.renameTensorsContaining(".ffn_norm", ".post_attention_norm");
  },
};
