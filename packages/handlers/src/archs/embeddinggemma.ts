import type { Handler } from "../handler";
import { fixGemmaSpacePrefix } from "./gemma3";

/**
 * EmbeddingGemma was published as "gemma3" with the sentence-transformers dense layers
 * as dense.0/dense.1; llama.cpp loads it as gemma-embedding. Runs before gemma3, and
 * the rename keeps the gemma3 handler from running after it.
 */
export const embeddinggemma: Handler = {
  name: "embeddinggemma",
  arch: "gemma3",
  detect: (m) => (m.hasTensor("dense.0.weight") ? ["tensor dense.0.weight"] : null),
  apply(t) {
    const P = "gemma-embedding.";
    t.renameArch("gemma3", "gemma-embedding");
    t.removeKv(`${P}attention.causal`);
    t.removeKv(`${P}attention.sliding_window_pattern`);
    t.injectF32(`${P}rope.freq_base_swa`, 10_000);
    const d0 = t.draft.findTensor("dense.0.weight");
    const d1 = t.draft.findTensor("dense.1.weight");
    if (d0 !== undefined && d1 !== undefined) {
      t.setU32(`${P}dense_2_feat_in`, d0.shape[0] ?? 1);
      t.setU32(`${P}dense_2_feat_out`, d0.shape[1] ?? 1);
      t.setU32(`${P}dense_3_feat_in`, d1.shape[0] ?? 1);
      t.setU32(`${P}dense_3_feat_out`, d1.shape[1] ?? 1);
    }
    t.renameTensor("dense.0.weight", "dense_2.weight");
    t.renameTensor("dense.1.weight", "dense_3.weight");
    t.renameTensor("norm.weight", "output_norm.weight");
    fixGemmaSpacePrefix(t, "embeddinggemma-add-space-prefix", "input and the embedding changes", "(as for Gemma 3)");
  },
};
