import { GgufValueType } from "@compat/gguf";
import type { Handler } from "../handler";
import type { Translation } from "../translation";

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
    const m = t.draft;
    t.setArch("deepseek2");
    t.copyKvPrefix(SRC, DST);
    t.setU32(`${DST}attention.head_count_kv`, 1);
    if (m.has(`${DST}attention.kv_lora_rank`) && m.has(`${DST}rope.dimension_count`)) {
      const kvLora = m.getNumber(`${DST}attention.kv_lora_rank`);
      t.setU32(`${DST}attention.key_length`, kvLora + m.getNumber(`${DST}rope.dimension_count`));
      t.setU32(`${DST}attention.value_length`, kvLora);
    }
    if (m.has(`${SRC}attention.key_length`)) {
      // The reference uses the key head dim for both (equal for GLM-4.7 Flash).
      const keyLength = m.getNumber(`${SRC}attention.key_length`);
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
export function fixEndOfGenerationIds(t: Translation): void {
  const m = t.draft;
  const needEot = !m.has("tokenizer.ggml.eot_token_id");
  const needEom = !m.has("tokenizer.ggml.eom_token_id");
  if (!needEot && !needEom) return;
  const kv = m.get("tokenizer.ggml.eos_token_ids");
  if (kv?.type !== GgufValueType.ARRAY) return;
  const arr = m.getArray("tokenizer.ggml.eos_token_ids");
  let ids: number[] = [];
  if (arr.itemType === GgufValueType.INT32) ids = (arr.toArray() as number[]).filter((v) => v >= 0);
  else if (arr.itemType === GgufValueType.UINT32) ids = arr.toArray() as number[];
  if (needEot && ids.length >= 2) t.setU32("tokenizer.ggml.eot_token_id", ids[1]!);
  if (needEom && ids.length >= 3) t.setU32("tokenizer.ggml.eom_token_id", ids[2]!);
}
