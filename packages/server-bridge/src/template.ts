/**
 * A llama.cpp built-in chat template for an Ollama Go template, for models whose GGUF has
 * no `tokenizer.chat_template` (llama.cpp uses the GGUF's own template whenever there is
 * one). Recognized by the turn markers each family's template writes.
 */
export function builtinTemplateFor(goTemplate: string): string | undefined {
  const has = (s: string) => goTemplate.includes(s);
  if (has("<|im_start|>")) return "chatml";
  if (has("<start_of_turn>")) return "gemma";
  if (has("<|start_header_id|>")) return "llama3";
  if (has("<|header_start|>")) return "llama4";
  if (has("<|start|>") && has("<|channel|>")) return "gpt-oss";
  if (has("[SYSTEM_PROMPT]")) return "mistral-v7";
  if (has("[INST]")) return "llama2";
  if (has("<|user|>") && has("<|end|>")) return "phi3";
  if (has("<|user|>")) return "zephyr";
  if (has("### Instruction:")) return "vicuna";
  return undefined;
}
