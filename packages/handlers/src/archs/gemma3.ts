import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { hasTensorPrefix, stringKv, u32Kv } from "../reads";
import { anyOf, kvMarkers } from "../markers";

/** Google's original Gemma 3 text-only chat template (data, byte for byte). */
const GEMMA3_CHAT_TEMPLATE =
  "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" +
  "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}" +
  "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";

/** The 1B's nested rope keys and llama.cpp's names for them. */
const NESTED_ROPE_KEYS = [
  ["gemma3.rope.global.freq_base", "gemma3.rope.freq_base"],
  ["gemma3.rope.local.freq_base", "gemma3.rope.freq_base_swa"],
] as const;

/**
 * Gemma 3 as Ollama's converters wrote it: the 1B with nested rope keys, the 4B/12B/27B
 * with the vision tower and projector in the same file, all without the RMS epsilon,
 * and tokenizer arrays longer than the embedding (multimodal tokens). The vision
 * tensors are hidden here; the clip view serves them.
 */
export const gemma3: Handler = {
  name: "gemma3",
  arch: "gemma3",
  detect(m) {
    return anyOf(
      m.has("gemma3.mm.tokens_per_image") && "kv gemma3.mm.tokens_per_image",
      hasTensorPrefix(m, "v.") && "embedded vision tensors v.*",
      hasTensorPrefix(m, "mm.") && "embedded projector tensors mm.*",
      ...kvMarkers(m, [...NESTED_ROPE_KEYS.map(([ollama]) => ollama), "tokenizer.ggml.add_padding_token", "tokenizer.ggml.add_unknown_token"]),
      !m.has("gemma3.attention.layer_norm_rms_epsilon") && "no gemma3.attention.layer_norm_rms_epsilon",
    );
  },
  apply(t) {
    t.copyKvs(NESTED_ROPE_KEYS);
    t.injectF32("gemma3.attention.layer_norm_rms_epsilon", 1e-6);
    t.injectF32("gemma3.rope.freq_base", 1_000_000);
    t.injectF32("gemma3.rope.freq_base_swa", 10_000);
    t.injectString("tokenizer.chat_template", GEMMA3_CHAT_TEMPLATE);
    // 4B and larger extend a 16k training context to 128k with linear x8 scaling; the 1B has none.
    const ctx = u32Kv(t.draft, "gemma3.context_length");
    if (ctx !== undefined && ctx >= 131_072) {
      t.injectString("gemma3.rope.scaling.type", "linear");
      t.injectF32("gemma3.rope.scaling.factor", 8);
    }
    const embd = t.draft.findTensor("token_embd.weight");
    if (embd !== undefined) {
      const rows = embd.shape[1] ?? 1;
      t.truncateArray("tokenizer.ggml.tokens", rows);
      t.truncateArray("tokenizer.ggml.scores", rows);
      t.truncateArray("tokenizer.ggml.token_type", rows);
    }
    t.hide("v.");
    t.hide("mm.");
    fixGemmaSpacePrefix(t, "gemma3-add-space-prefix", "prompt", "for Gemma 3");
  },
};

/**
 * The gap every Gemma SentencePiece handler closes (fix `name`): Ollama never wrote
 * tokenizer.ggml.add_space_prefix, llama.cpp defaults it to true for SentencePiece and
 * its converter writes false. `input` and `converter` finish the fix's reason.
 */
export function fixGemmaSpacePrefix(t: Translation, name: string, input: string, converter: string): void {
  t.fix({
    name,
    reason: `Ollama never wrote tokenizer.ggml.add_space_prefix, so llama.cpp's SentencePiece default (true) puts a space before every ${input}; llama.cpp's converter writes false ${converter}`,
    needed: () => stringKv(t.draft, "tokenizer.ggml.model") === "llama" && !t.draft.has("tokenizer.ggml.add_space_prefix"),
    apply: () => t.setBool("tokenizer.ggml.add_space_prefix", false),
  });
}
