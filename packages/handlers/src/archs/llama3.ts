import { GgufValueType } from "@compat/gguf";
import type { GgufModel } from "@compat/gguf";
import { anyOf, missingOrDefault, stringKv, tokenAt, u32Kv } from "../detect";
import type { Handler } from "../handler";

const EOT_ID = 128009;
const END_OF_TEXT_ID = 128001;

/**
 * Ollama's converter wrote tokenizer.ggml.scores even for BPE vocabularies, which
 * llama.cpp's converter never does; Ollama's later files also carry eos_token_ids.
 */
function writtenByOllama(m: GgufModel): boolean {
  return (stringKv(m, "tokenizer.ggml.model") === "gpt2" && m.has("tokenizer.ggml.scores")) || m.has("tokenizer.ggml.eos_token_ids");
}

/**
 * Llama 3 files Ollama converted early lack the pre-tokenizer name and point EOS at
 * <|end_of_text|> instead of <|eot_id|>, so chats never stop. Metadata only.
 *
 * One deliberate tightening of the reference's detector: a base Llama 3 converted by
 * llama.cpp itself also has EOS = 128001 with a proper pre-tokenizer, and the
 * reference would rewrite it. We only take that branch for files Ollama's converter
 * wrote, so llama.cpp-native files stay untouched.
 */
export const llama3: Handler = {
  name: "llama3-metadata",
  arch: "llama",
  detect(m) {
    if (tokenAt(m, EOT_ID) !== "<|eot_id|>") return null;
    const template = stringKv(m, "tokenizer.chat_template");
    const chat = anyOf(
      tokenAt(m, 128006) === "<|start_header_id|>" && "token 128006 <|start_header_id|>",
      template?.includes("<|start_header_id|>") && "chat template uses <|start_header_id|>",
      template?.includes("<|eot_id|>") && "chat template uses <|eot_id|>",
    );
    if (chat === null) return null;
    const gap = anyOf(
      missingOrDefault(m, "tokenizer.ggml.pre") && "tokenizer.ggml.pre missing or default",
      u32Kv(m, "tokenizer.ggml.eos_token_id") === END_OF_TEXT_ID && writtenByOllama(m) && "eos_token_id is <|end_of_text|> in an Ollama-written vocab",
    );
    return gap === null ? null : ["token 128009 <|eot_id|>", ...chat, ...gap];
  },
  apply(t) {
    if (t.isMissingOrDefault("tokenizer.ggml.pre")) t.setString("tokenizer.ggml.pre", "llama-bpe");
    for (const key of ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]) {
      const id = t.getU32(key);
      if (id === undefined || id === END_OF_TEXT_ID) t.setU32(key, EOT_ID);
    }
    t.setArray("tokenizer.ggml.eos_token_ids", GgufValueType.INT32, [EOT_ID]);
  },
};
