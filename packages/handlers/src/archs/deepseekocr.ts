import type { Handler } from "../handler";
import { u32Kv } from "../reads";

const DST = "deepseek2-ocr.";

/**
 * DeepSeek-OCR: llama.cpp's name is deepseek2-ocr. Ollama's file lacks the RMS epsilon
 * and the expert sizes llama.cpp requires; the sizes are read back from the first MoE
 * block (block 0 is dense). The SAM encoder (s.), CLIP tower (v.) and projector (mm.)
 * belong to the clip side and are hidden from the text model.
 */
export const deepseekocr: Handler = {
  name: "deepseekocr",
  arch: "deepseekocr",
  detect: () => ["architecture deepseekocr"],
  apply(t) {
    t.renameArch("deepseekocr", "deepseek2-ocr");
    t.injectF32(`${DST}attention.layer_norm_rms_epsilon`, 1e-6);
    if (!t.draft.has(`${DST}expert_feed_forward_length`)) {
      // ffn_down_exps is [n_ff_exp, n_embd, n_expert]
      const down = t.draft.findTensor("blk.1.ffn_down_exps.weight");
      if (down !== undefined) t.setU32(`${DST}expert_feed_forward_length`, down.shape[0]!);
    }
    if (!t.draft.has(`${DST}expert_shared_count`)) {
      // the shared experts are one FFN n_expert_shared times as wide as a routed one
      const shexp = t.draft.findTensor("blk.1.ffn_down_shexp.weight");
      const perExpert = u32Kv(t.draft, `${DST}expert_feed_forward_length`);
      if (shexp !== undefined && perExpert !== undefined && perExpert > 0) {
        t.setU32(`${DST}expert_shared_count`, Math.floor(shexp.shape[0]! / perExpert));
      }
    }
    t.hide("s.");
    t.hide("v.");
    t.hide("mm.");
  },
};
