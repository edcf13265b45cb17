/** Well-known metadata keys (names as in gguf-py's constants). `{arch}` keys are built with `archKey`. */
export const GgufKeys = {
  ARCHITECTURE: "general.architecture",
  ALIGNMENT: "general.alignment",
  QUANTIZATION_VERSION: "general.quantization_version",
  FILE_TYPE: "general.file_type",
  NAME: "general.name",
  TYPE: "general.type",
  BASENAME: "general.basename",
  SIZE_LABEL: "general.size_label",
  LICENSE: "general.license",
  TOKENIZER_MODEL: "tokenizer.ggml.model",
  TOKENIZER_PRE: "tokenizer.ggml.pre",
  TOKENIZER_TOKENS: "tokenizer.ggml.tokens",
  TOKENIZER_SCORES: "tokenizer.ggml.scores",
  TOKENIZER_TOKEN_TYPE: "tokenizer.ggml.token_type",
  TOKENIZER_MERGES: "tokenizer.ggml.merges",
  TOKENIZER_BOS_ID: "tokenizer.ggml.bos_token_id",
  TOKENIZER_EOS_ID: "tokenizer.ggml.eos_token_id",
  TOKENIZER_PAD_ID: "tokenizer.ggml.padding_token_id",
  TOKENIZER_UNK_ID: "tokenizer.ggml.unknown_token_id",
  CHAT_TEMPLATE: "tokenizer.chat_template",
} as const;

/** `archKey("llama", "context_length")` → "llama.context_length". */
export function archKey(arch: string, suffix: string): string {
  return `${arch}.${suffix}`;
}

/** Default data alignment when general.alignment is absent. */
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** llama.cpp's `general.file_type` values (LlamaFileType), by number. */
const FILE_TYPES: Record<number, string> = {
  0: "F32",
  1: "F16",
  2: "Q4_0",
  3: "Q4_1",
  7: "Q8_0",
  8: "Q5_0",
  9: "Q5_1",
  10: "Q2_K",
  11: "Q3_K_S",
  12: "Q3_K_M",
  13: "Q3_K_L",
  14: "Q4_K_S",
  15: "Q4_K_M",
  16: "Q5_K_S",
  17: "Q5_K_M",
  18: "Q6_K",
  19: "IQ2_XXS",
  20: "IQ2_XS",
  21: "Q2_K_S",
  22: "IQ3_XS",
  23: "IQ3_XXS",
  24: "IQ1_S",
  25: "IQ4_NL",
  26: "IQ3_S",
  27: "IQ3_M",
  28: "IQ2_S",
  29: "IQ2_M",
  30: "IQ4_XS",
  31: "IQ1_M",
  32: "BF16",
  36: "TQ1_0",
  37: "TQ2_0",
  38: "MXFP4_MOE",
  39: "NVFP4",
  40: "Q1_0",
  41: "Q2_0",
  1024: "GUESSED",
};

/** Human name of a general.file_type value ("Q4_K_M"), or undefined if unknown. */
export function fileTypeName(id: number): string | undefined {
  return FILE_TYPES[id];
}
