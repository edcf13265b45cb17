import { GgufValueType } from "@compat/gguf";
import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { blocksWithTensors, intArrayKv, stringArrayKv, stringKv, u32Kv } from "../reads";
import { concatTensors } from "../ops";

/**
 * GLM-OCR as Ollama wrote it: llama.cpp loads it as glm4, which wants M-RoPE sections
 * as a 4-item list, llama.cpp's norm/output names, the chatglm pre-tokenizer, and the
 * FFN gate and up projections fused into one ffn_up (gate rows first) where Ollama's
 * converter split them. The vision tower in the same file is hidden.
 */
export const glmocr: Handler = {
  name: "glmocr",
  arch: "glmocr",
  // the architecture name itself is the marker: llama.cpp has no "glmocr"
  detect: () => ["architecture glmocr"],
  apply(t) {
    t.renameArch("glmocr", "glm4");
    const sections = intArrayKv(t.draft, "glm4.rope.mrope_section");
    if (sections !== undefined && sections.length === 3) {
      t.setArray("glm4.rope.dimension_sections", GgufValueType.INT32, [...sections, 0]);
    }
    if (!t.draft.has("glm4.rope.dimension_count")) {
      const keyLength = u32Kv(t.draft, "glm4.attention.key_length");
      if (keyLength !== undefined) t.setU32("glm4.rope.dimension_count", keyLength);
    }
    const pre = stringKv(t.draft, "tokenizer.ggml.pre");
    if (pre !== undefined && pre !== "chatglm-bpe") t.setString("tokenizer.ggml.pre", "chatglm-bpe");

    t.renameTensorsContaining(".attn_out.", ".attn_output.");
    t.renameTensorsContaining(".post_attn_norm.", ".post_attention_norm.");
    t.renameTensorsContaining(".post_ffn_norm.", ".post_ffw_norm.");

    // The reference's default when the block count is missing.
    const blocks = u32Kv(t.draft, "glm4.block_count") ?? 16;
    for (const b of blocksWithTensors(t.draft, blocks)) {
      // ffn_up becomes [ne0, 2*ne1], gate's rows then up's: the reference's raw concat; mixed
      // types (which its op would fail on, a size mismatch) are widened to F32 first, its rule
      // for its other mixed-type merges
      concatTensors(t, `blk.${b}.ffn_up.weight`, [`blk.${b}.ffn_gate.weight`, `blk.${b}.ffn_up.weight`], 1, "ffn_gate+ffn_up");
      t.hide(`blk.${b}.ffn_gate.`);
    }
    t.hide("v.");
    t.hide("mm.");

    const user = userTurnId(t);
    t.fix({
      name: "glmocr-user-turn-end",
      reason:
        "Ollama's first GLM-OCR converter wrote <|user|> only into eos_token_ids (which llama.cpp does not read) and no eot_token_id, so llama.cpp does not stop when the model opens the next user turn; llama.cpp's converter (and Ollama's later one) write eot_token_id = <|user|>",
      needed: () => user !== undefined && !t.draft.has("tokenizer.ggml.eot_token_id"),
      apply: () => t.setU32("tokenizer.ggml.eot_token_id", user!),
    });
  },
};

/** The id of <|user|> when Ollama's eos_token_ids (from generation_config) lists it. */
function userTurnId(t: Translation): number | undefined {
  const id = stringArrayKv(t.draft, "tokenizer.ggml.tokens")?.indexOf("<|user|>") ?? -1;
  if (id < 0) return undefined;
  return intArrayKv(t.draft, "tokenizer.ggml.eos_token_ids")?.includes(id) ? id : undefined;
}

