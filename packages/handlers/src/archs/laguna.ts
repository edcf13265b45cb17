import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { arrayKv, intArrayKv, stringArrayKv, u32Kv } from "../reads";
import { anyOf, kvMarkers } from "../markers";

const TURN_END = "</assistant>";
const CONTROL = 3;

/** The id of </assistant>, when the vocabulary has it. */
function turnEndId(t: Translation): number | undefined {
  const at = stringArrayKv(t.draft, "tokenizer.ggml.tokens")?.indexOf(TURN_END) ?? -1;
  return at >= 0 ? at : undefined;
}

/** Ollama's eos_token_ids without the BOS id: what llama.cpp's converter registers as eot. */
function extraEosId(t: Translation): number | undefined {
  const bos = u32Kv(t.draft, "tokenizer.ggml.bos_token_id");
  return intArrayKv(t.draft, "tokenizer.ggml.eos_token_ids")?.find((id) => id !== bos);
}

/** The type of token `id`, when the vocabulary has types. */
function tokenType(t: Translation, id: number): unknown {
  return arrayKv(t.draft, "tokenizer.ggml.token_type")?.toArray()[id];
}

/** Ollama's nested SWA rope keys and llama.cpp's names for them. */
const SWA_ROPE_KEYS = [
  ["laguna.rope.swa.dimension_count", "laguna.rope.dimension_count_swa"],
  ["laguna.rope.swa.freq_base", "laguna.rope.freq_base_swa"],
] as const;

/** Older laguna files nest the SWA rope keys and call the attention gate attn_g. */
export const laguna: Handler = {
  name: "laguna",
  arch: "laguna",
  detect(m) {
    return anyOf(
      ...kvMarkers(m, SWA_ROPE_KEYS.map(([ollama]) => ollama)),
      m.hasTensor("blk.0.attn_g.weight") && "tensor blk.0.attn_g.weight",
    );
  },
  apply(t) {
    t.copyKvs(SWA_ROPE_KEYS);
    t.renameTensorSuffix(".attn_g.weight", ".attn_gate.weight");
    const turnEnd = turnEndId(t);
    t.fix({
      name: "laguna-assistant-turn-end",
      reason:
        "Ollama wrote eos_token_ids [2, 24] and left </assistant> a user-defined token, which llama.cpp neither stops at nor hides; llama.cpp's converter writes eot_token_id (the eos id other than BOS) and marks </assistant> CONTROL",
      needed: () =>
        turnEnd !== undefined &&
        ((!t.draft.has("tokenizer.ggml.eot_token_id") && extraEosId(t) === turnEnd) ||
          (t.draft.has("tokenizer.ggml.token_type") && tokenType(t, turnEnd) !== CONTROL)),
      apply: () => {
        if (!t.draft.has("tokenizer.ggml.eot_token_id") && extraEosId(t) === turnEnd) t.setU32("tokenizer.ggml.eot_token_id", turnEnd!);
        t.setArrayItem("tokenizer.ggml.token_type", turnEnd!, CONTROL);
      },
    });
  },
};
