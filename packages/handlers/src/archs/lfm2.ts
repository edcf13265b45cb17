import type { Handler } from "../handler";
import { u32Kv } from "../reads";

/**
 * LFM2's final norm is loaded under token_embd_norm in llama.cpp; some files also
 * claim a feed_forward_length their ffn_gate tensors contradict (llama.cpp picks the
 * model size from it), so the tensor shape wins.
 */
export const lfm2: Handler = {
  name: "lfm2",
  arch: "lfm2",
  detect(m) {
    return m.hasTensor("output_norm.weight") && !m.hasTensor("token_embd_norm.weight")
      ? ["tensor output_norm.weight without token_embd_norm.weight"]
      : null;
  },
  apply(t) {
    t.renameTensor("output_norm.weight", "token_embd_norm.weight");
    t.setString("tokenizer.ggml.pre", "lfm2");
    const gate = t.draft.findTensor("blk.0.ffn_gate.weight");
    if (gate !== undefined) {
      const nFf = gate.shape[1] ?? 1;
      if (u32Kv(t.draft, "lfm2.feed_forward_length") !== nFf) t.setU32("lfm2.feed_forward_length", nFf);
    }
  },
};
