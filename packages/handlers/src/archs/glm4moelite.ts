import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { u32ArrayKv, u32Kv } from "../reads";

const SRC = "glm4moelite.";
const DST = "deepseek2.";

/**
 * GLM-4.7 Flash is an MLA model that llama.cpp loads as deepseek2. Ollama's file has the
 * plain and _mla head dims the other way round, real KV heads instead of 1, and no
 * EOT/EOM ids.
 */
export const glm4moelite: Handler = {
  name: "glm4moelite",
  arch: "glm4moelite",
  detect: () => ["architecture glm4moelite"],
  apply(t) {
    t.renameArch("glm4moelite", "deepseek2");
    t.setU32(`${DST}attention.head_count_kv`, 1);
    const kvLora = u32Kv(t.draft, `${DST}attention.kv_lora_rank`);
    const ropeDims = u32Kv(t.draft, `${DST}rope.dimension_count`);
    if (kvLora !== undefined && ropeDims !== undefined) {
      t.setU32(`${DST}attention.key_length`, kvLora + ropeDims);
      t.setU32(`${DST}attention.value_length`, kvLora);
    }
    const keyLength = u32Kv(t.draft, `${SRC}attention.key_length`);
    if (keyLength !== undefined) {
      // The reference uses the key head dim for both (equal for GLM-4.7 Flash).
      t.setU32(`${DST}attention.key_length_mla`, keyLength);
      t.setU32(`${DST}attention.value_length_mla`, keyLength);
    }
    t.injectU32(`${DST}expert_group_count`, 1);
    t.injectU32(`${DST}expert_group_used_count`, 1);
    t.setString("tokenizer.ggml.pre", "glm4");
    fixEndOfGenerationIds(t);
  },
};

/** EOT and EOM are the second and third of Ollama's eos_token_ids, when llama.cpp's keys are missing. */
function fixEndOfGenerationIds(t: Translation): void {
  const needEot = !t.draft.has("tokenizer.ggml.eot_token_id");
  const needEom = !t.draft.has("tokenizer.ggml.eom_token_id");
  if (!needEot && !needEom) return;
  const ids = u32ArrayKv(t.draft, "tokenizer.ggml.eos_token_ids") ?? [];
  if (needEot && ids.length >= 2) t.setU32("tokenizer.ggml.eot_token_id", ids[1]!);
  if (needEom && ids.length >= 3) t.setU32("tokenizer.ggml.eom_token_id", ids[2]!);
}
