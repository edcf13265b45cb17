import type { Handler } from "../handler";
import { hasTensorPrefix, missingOrDefault } from "../reads";
import { anyOf, kvMarkers } from "../markers";

/** Ollama's YaRN/temperature keys and llama.cpp's names for them. */
const OLLAMA_ROPE_KEYS = [
  ["mistral3.rope.scaling.beta_fast", "mistral3.rope.scaling.yarn_beta_fast"],
  ["mistral3.rope.scaling.beta_slow", "mistral3.rope.scaling.yarn_beta_slow"],
  ["mistral3.rope.scaling.mscale_all_dim", "mistral3.rope.scaling.yarn_log_multiplier"],
  ["mistral3.rope.scaling_beta", "mistral3.attention.temperature_scale"],
] as const;

/** The ones whose presence marks an Ollama file (the reference does not look at beta_slow). */
const MARKER_KEYS = ["mistral3.rope.scaling.beta_fast", "mistral3.rope.scaling.mscale_all_dim", "mistral3.rope.scaling_beta"];

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
      ...kvMarkers(m, MARKER_KEYS),
    );
  },
  apply(t) {
    t.copyKvs(OLLAMA_ROPE_KEYS);
    if (missingOrDefault(t.draft, "tokenizer.ggml.pre")) t.setString("tokenizer.ggml.pre", "tekken");
    t.hide("v.");
    t.hide("mm.");
  },
};
