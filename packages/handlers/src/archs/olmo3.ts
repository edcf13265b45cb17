import type { Handler } from "../handler";
import { stringKv } from "../reads";

/**
 * llama.cpp has no "olmo3" architecture; its olmo2 loader covers the same tensors and
 * OLMo 3's sliding-window layout. Every olmo3 file is renamed (there is no other marker).
 */
export const olmo3: Handler = {
  name: "olmo3",
  arch: "olmo3",
  detect: () => ["architecture olmo3"],
  apply(t) {
    t.renameArch("olmo3", "olmo2");
    // Ollama stored HF's rope_scaling.attention_factor as rope.scaling.attn_factor, which llama.cpp
    // multiplies into the YaRN attention scale it already derives from the factor.
    t.fix({
      name: "olmo3-yarn-attn-factor-once",
      reason:
        "the copied olmo2.rope.scaling.attn_factor is multiplied into the YaRN attention scale llama.cpp already derives from rope.scaling.factor, so the scale is applied twice; llama.cpp's converter writes it as yarn_attn_factor, which the olmo2 loader does not read",
      needed: () => t.draft.has("olmo2.rope.scaling.attn_factor") && stringKv(t.draft, "olmo2.rope.scaling.type") === "yarn",
      apply: () => t.removeKv("olmo2.rope.scaling.attn_factor"),
    });
  },
};
