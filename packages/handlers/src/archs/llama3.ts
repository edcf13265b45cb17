import { GgufValueType } from "@compat/gguf";
import { anyOf, archIs, missingOrDefault, stringKv, tokenAt, u32Kv } from "../detect";
import type { Handler } from "../handler";

const EOT_ID = 128009;
const END_OF_TEXT_ID = 128001;

/**
 * Llama 3 files Ollama converted early lack the pre-tokenizer name and point EOS at
 * <|end_of_text|> instead of <|eot_id|>, so chats never stop. Metadata only.
 */
export const llama3: Handler = {
  name: "llama3-metadata",
  arch: "llama",
  detect(m) {
    if (!archIs(m, "llama") || tokenAt(m, EOT_ID) !== "<|eot_id|>") return null;
    const template = stringKv(m, "tokenizer.chat_template");
    const chat = anyOf(
      tokenAt(m, 128006) === "<|start_header_id|>" && "token 128006 <|start_header_id|>",
      template?.includes("<|start_header_id|>") && "chat template uses <|start_header_id|>",
      template?.includes("<|eot_id|>") && "chat template uses <|eot_id|>",
    );
    if (chat === null) return null;
    const gap = anyOf(
      missingOrDefault(m, "tokenizer.ggml.pre") && "tokenizer.ggml.pre missing or default",
      u32Kv(m, "tokenizer.ggml.eos_token_id") === END_OF_TEXT_ID && "eos_token_id is <|end_of_text|>",
    );
    return gap === null ? null : ["token 128009 <|eot_id|>", ...chat, ...gap];
  },
  apply(t) {
    const m = t.draft;
    if (missingOrDefault(m, "tokenizer.ggml.pre")) t.setString("tokenizer.ggml.pre", "llama-bpe");
    for (const key of ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]) {
      const id = u32Kv(m, key);
      if (id === undefined || id === END_OF_TEXT_ID) t.setU32(key, EOT_ID);
    }
    t.setArray("tokenizer.ggml.eos_token_ids", GgufValueType.INT32, [EOT_ID]);
  },
};
