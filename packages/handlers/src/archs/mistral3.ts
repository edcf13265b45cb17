import { anyOf, hasTensorPrefix } from "../detect";
import type { Handler } from "../handler";

/**
 * Mistral Small 3.x as Ollama wrote it: vision tower inline, and YaRN/temperature keys
 * under Ollama's names. Text Q/K were permuted by Ollama's writer already.
 */
export const mistral3: Handler = {
  name: "mistral3",
  arch: "mistral3",
  detect(m) {
    return anyOf(
      hasTensorPrefix(m, "v.") && "embedded vision tensors v.*",
      hasTensorPrefix(m, "mm.") && "embedded projector tensors mm.*",
      m.has("mistral3.rope.scaling.beta_fast") && "kv mistral3.rope.scaling.beta_fast",
      m.has("mistral3.rope.scaling.mscale_all_dim") && "kv mistral3.rope.scaling.mscale_all_dim",
      m.has("mistral3.rope.scaling_beta") && "kv mistral3.rope.scaling_beta",
    );
  },
  apply(t) {
    t.copyKv("mistral3.rope.scaling.beta_fast", "mistral3.rope.scaling.yarn_beta_fast");
    t.copyKv("mistral3.rope.scaling.beta_slow", "mistral3.rope.scaling.yarn_beta_slow");
    t.copyKv("mistral3.rope.scaling.mscale_all_dim", "mistral3.rope.scaling.yarn_log_multiplier");
    t.copyKv("mistral3.rope.scaling_beta", "mistral3.attention.temperature_scale");
    if (t.isMissingOrDefault("tokenizer.ggml.pre")) t.setString("tokenizer.ggml.pre", "tekken");
    t.hide("v.");
    t.hide("mm.");
  },
};
