import type { Handler } from "../handler";
import { fixAddBos } from "./llama3";
import { hasTensorPrefix, missingOrDefault } from "../reads";
import { anyOf } from "../markers";

/** Llama 4 with its vision tower inline: the text view only hides it. */
export const llama4: Handler = {
  name: "llama4",
  arch: "llama4",
  detect(m) {
    return anyOf(hasTensorPrefix(m, "v.") && "embedded vision tensors v.*", hasTensorPrefix(m, "mm.") && "embedded projector tensors mm.*");
  },
  apply(t) {
    t.hide("v.");
    t.hide("mm.");
    t.fix({
      name: "llama4-pre-tokenizer",
      reason:
        "Llama 4's pre-tokenizer hash is not in Ollama's table, so it wrote \"default\" and llama.cpp splits text with its generic BPE regex; llama.cpp's converter writes \"llama4\"",
      needed: () => missingOrDefault(t.draft, "tokenizer.ggml.pre"),
      apply: () => t.setString("tokenizer.ggml.pre", "llama4"),
    });
    fixAddBos(
      t,
      "llama4-add-bos",
      "Ollama's legacy writer stored add_bos_token = false when tokenizer_config.json had no such key, so llama.cpp adds no BOS; Llama 4 adds it through its tokenizer.json post-processor and llama.cpp's converter writes true",
    );
  },
};
