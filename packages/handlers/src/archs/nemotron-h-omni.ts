import type { Handler } from "../handler";
import { boolKv, hasTensorPrefix, u32Kv } from "../reads";
import { anyOf } from "../markers";

const SRC = "nemotron_h_omni.";

/**
 * Nemotron-H with vision (and audio) towers inline. llama.cpp loads the text part with
 * its Nemotron-H loader: nemotron_h_moe when the file counts experts, else nemotron_h.
 * Every text key is copied under that name (the vision.* and audio.* ones belong to the
 * clip side), and the towers are hidden. The nemotron_h_moe handler, later in the
 * registry, then gets its turn on the renamed file, as in the reference.
 */
export const nemotronHOmni: Handler = {
  name: "nemotron_h_omni",
  arch: "nemotron_h_omni",
  detect: (m) =>
    anyOf(
      hasTensorPrefix(m, "v.") && "vision tensors v.*",
      hasTensorPrefix(m, "a.") && "audio tensors a.*",
      hasTensorPrefix(m, "mm.") && "projector tensors mm.*",
    ),
  apply(t) {
    const experts = (key: string) => (u32Kv(t.draft, SRC + key) ?? 0) > 0;
    const textArch = experts("expert_count") || experts("expert_used_count") ? "nemotron_h_moe" : "nemotron_h";
    t.setArch(textArch);
    t.copyKvPrefixExcept(SRC, `${textArch}.`, ["vision.", "audio."]);
    t.hide("a.");
    t.hide("v.");
    t.hide("mm.");

    t.fix({
      name: "nemotron_h_omni-add-bos",
      reason:
        "Ollama's legacy writer stored add_bos_token = false (from tokenizer_config.json, false when the key is missing), so llama.cpp adds no BOS; the tokenizer adds BOS through its post-processor, and llama.cpp's converter writes add_bos_token = true for the dense Nemotron-H (NemotronHModel.set_vocab)",
      needed: () =>
        textArch === "nemotron_h" &&
        boolKv(t.draft, "tokenizer.ggml.add_bos_token") === false,
      apply: () => t.setBool("tokenizer.ggml.add_bos_token", true),
    });
  },
};
