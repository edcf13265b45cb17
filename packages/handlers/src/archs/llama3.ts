import { GgufValueType } from "@compat/gguf";
import type { GgufModel } from "@compat/gguf";
import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { boolKv, missingOrDefault, stringKv, tokenAt, u32Kv } from "../reads";
import { anyOf } from "../markers";

const EOT_ID = 128009;
const END_OF_TEXT_ID = 128001;

/**
 * Ollama's converter wrote tokenizer.ggml.scores even for BPE vocabularies, which
 * llama.cpp's converter never does; Ollama's later files also carry eos_token_ids.
 */
function writtenByOllama(m: GgufModel): boolean {
  return (stringKv(m, "tokenizer.ggml.model") === "gpt2" && m.has("tokenizer.ggml.scores")) || m.has("tokenizer.ggml.eos_token_ids");
}

const addBosFalse = (m: GgufModel) => boolKv(m, "tokenizer.ggml.add_bos_token") === false;

/** Token 128009 is <|eot_id|> and the chat markers of Llama 3 are there (null otherwise). */
function llama3ChatMarkers(m: GgufModel): string[] | null {
  if (stringKv(m, "general.architecture") !== "llama" || tokenAt(m, EOT_ID) !== "<|eot_id|>") return null;
  const template = stringKv(m, "tokenizer.chat_template");
  const chat = anyOf(
    tokenAt(m, 128006) === "<|start_header_id|>" && "token 128006 <|start_header_id|>",
    template?.includes("<|start_header_id|>") && "chat template uses <|start_header_id|>",
    template?.includes("<|eot_id|>") && "chat template uses <|eot_id|>",
  );
  return chat === null ? null : ["token 128009 <|eot_id|>", ...chat];
}

/**
 * The gap of Ollama's legacy writer that Llama 3 and Llama 4 share (fix `name`): it stored
 * add_bos_token = false when tokenizer_config.json had no such key, while the tokenizer.json
 * post-processor adds BOS and llama.cpp's converter writes true. `reason` says it for the arch.
 */
export function fixAddBos(t: Translation, name: string, reason: string): void {
  t.fix({
    name,
    reason,
    needed: () => boolKv(t.draft, "tokenizer.ggml.add_bos_token") === false,
    apply: () => t.setBool("tokenizer.ggml.add_bos_token", true),
  });
}

function fixLlama3AddBos(t: Translation): void {
  fixAddBos(
    t,
    "llama3-add-bos",
    "Ollama's legacy writer stored add_bos_token = false when tokenizer_config.json had no such key (Llama 3 has none), so llama.cpp adds no <|begin_of_text|>; Llama 3 adds it through its tokenizer.json post-processor and llama.cpp's converter writes true",
  );
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
    const chat = llama3ChatMarkers(m);
    if (chat === null) return null;
    const gap = anyOf(
      missingOrDefault(m, "tokenizer.ggml.pre") && "tokenizer.ggml.pre missing or default",
      u32Kv(m, "tokenizer.ggml.eos_token_id") === END_OF_TEXT_ID && writtenByOllama(m) && "eos_token_id is <|end_of_text|> in an Ollama-written vocab",
    );
    return gap === null ? null : [...chat, ...gap];
  },
  // Ollama's later Llama 3 files (pre llama-bpe, eos <|eot_id|>) need nothing from the reference
  // but carry the same add_bos_token = false.
  detectGaps(m) {
    const chat = llama3ChatMarkers(m);
    if (chat === null || !writtenByOllama(m) || !addBosFalse(m)) return null;
    return [...chat, "add_bos_token false in an Ollama-written vocab"];
  },
  applyFixes: fixLlama3AddBos,
  apply(t) {
    if (missingOrDefault(t.draft, "tokenizer.ggml.pre")) t.setString("tokenizer.ggml.pre", "llama-bpe");
    for (const key of ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]) {
      const id = u32Kv(t.draft, key);
      if (id === undefined || id === END_OF_TEXT_ID) t.setU32(key, EOT_ID);
    }
    t.setArray("tokenizer.ggml.eos_token_ids", GgufValueType.INT32, [EOT_ID]);
    fixLlama3AddBos(t);
  },
};
