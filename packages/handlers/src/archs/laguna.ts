import { anyOf } from "../detect";
import type { Handler } from "../handler";

/** Older laguna files nest the SWA rope keys and call the attention gate attn_g. */
export const laguna: Handler = {
  name: "laguna",
  arch: "laguna",
  detect(m) {
    return anyOf(
      m.has("laguna.rope.swa.dimension_count") && "kv laguna.rope.swa.dimension_count",
      m.has("laguna.rope.swa.freq_base") && "kv laguna.rope.swa.freq_base",
      m.hasTensor("blk.0.attn_g.weight") && "tensor blk.0.attn_g.weight",
    );
  },
  apply(t) {
    t.copyKv("laguna.rope.swa.dimension_count", "laguna.rope.dimension_count_swa");
    t.copyKv("laguna.rope.swa.freq_base", "laguna.rope.freq_base_swa");
    t.renameTensorSuffix(".attn_g.weight", ".attn_gate.weight");
  },
};
