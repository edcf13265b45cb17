import type { Handler } from "../handler";
import { hasTensorSuffix } from "../reads";

/**
 * Ollama wrote head_count_kv per layer (0 on linear-attention layers) and the SSM
 * time-step bias without its ".bias" suffix.
 */
export const qwen3next: Handler = {
  name: "qwen3next",
  arch: "qwen3next",
  detect(m) {
    return hasTensorSuffix(m, ".ssm_dt") ? ["tensor blk.N.ssm_dt without .bias"] : null;
  },
  apply(t) {
    t.collapseArrayToMax("qwen3next.attention.head_count_kv", 0);
    t.renameTensorSuffix(".ssm_dt", ".ssm_dt.bias");
  },
};
