import { GgufValueType, type GgufModel } from "@compat/gguf";
import type { Handler } from "../handler";
import { fixGemmaSpacePrefix } from "./gemma3";
import type { Translation } from "../translation";
import { arrayKv } from "../reads";

/** `<end_of_turn>` in the Gemma vocabulary; Ollama's own runner stops on it. */
const END_OF_TURN_ID = 106;
const TOKEN_TYPE_NORMAL = 1;
const TOKEN_TYPE_BYTE = 6;

/**
 * Gemma 3n as Ollama's converter wrote it: token_embd and the tokenizer carry the whole
 * vocabulary (text plus multimodal markers), per_layer_token_embd only the text part.
 * llama.cpp checks both embeddings against the token count, so everything vocab-shaped
 * is cut to the per-layer rows. The converter dropped the vision and audio towers, so
 * there is nothing to hide.
 */
export const gemma3n: Handler = {
  name: "gemma3n",
  arch: "gemma3n",
  detect(m) {
    const rows = perLayerMismatch(m);
    return rows === undefined ? null : [`token_embd has ${rows.embd} rows, per_layer_token_embd ${rows.perLayer}`];
  },
  apply(t) {
    const perLayer = t.draft.findTensor("per_layer_token_embd.weight");
    if (perLayer === undefined) return;
    const vocab = perLayer.shape[1] ?? 0;
    t.setString("tokenizer.ggml.model", "llama");
    const embd = t.draft.findTensor("token_embd.weight");
    // metadata only: the loader then reads the first `vocab` rows from the same offset
    if (embd !== undefined) t.reshape("token_embd.weight", [embd.shape[0] ?? 0, vocab]);
    t.truncateArray("tokenizer.ggml.tokens", vocab);
    t.truncateArray("tokenizer.ggml.scores", vocab);
    t.truncateArray("tokenizer.ggml.token_type", vocab);
    retagTokenTypes(t, vocab);
    appendEndOfTurnEos(t);

    t.fix({
      name: "gemma3n-rope-freq-base-swa",
      reason:
        "Ollama wrote the sliding-window rope base as gemma3n.rope.freq_base_local, which llama.cpp does not read, so its sliding layers rotate with freq_base (1e6) instead of 1e4; llama.cpp's converter writes it as gemma3n.rope.freq_base_swa",
      needed: () => t.draft.has("gemma3n.rope.freq_base_local") && !t.draft.has("gemma3n.rope.freq_base_swa"),
      apply: () => t.copyKv("gemma3n.rope.freq_base_local", "gemma3n.rope.freq_base_swa"),
    });
    fixGemmaSpacePrefix(t, "gemma3n-add-space-prefix", "prompt", "for Gemma 3n (Gemma3Model.set_vocab)");
  },
};

function perLayerMismatch(m: GgufModel): { embd: number; perLayer: number } | undefined {
  const embd = m.findTensor("token_embd.weight")?.shape[1];
  const perLayer = m.findTensor("per_layer_token_embd.weight")?.shape[1];
  if (embd === undefined || perLayer === undefined || embd === perLayer) return undefined;
  return { embd, perLayer };
}

/** `<0xNN>` pieces become BYTE and `<unused…>` pieces NORMAL, as llama.cpp's SPM vocab wants them. */
function retagTokenTypes(t: Translation, vocab: number): void {
  const types = flatArray(t, "tokenizer.ggml.token_type");
  const tokens = flatArray(t, "tokenizer.ggml.tokens");
  if (types?.itemType !== GgufValueType.INT32 || tokens?.itemType !== GgufValueType.STRING) return;
  const n = Math.min(types.values.length, vocab, tokens.values.length);
  const out = (types.values.slice(0, n) as number[]).slice();
  for (let i = 0; i < n; i++) {
    const text = tokens.values[i] as string;
    if (isBytePiece(text)) out[i] = TOKEN_TYPE_BYTE;
    else if (text.startsWith("<unused")) out[i] = TOKEN_TYPE_NORMAL;
  }
  t.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, out);
}

/** Six bytes shaped `<0x??>` (the reference checks positions 0-2 and 5 only). */
function isBytePiece(text: string): boolean {
  const b = Buffer.from(text, "utf8");
  return b.length === 6 && b[0] === 0x3c && b[1] === 0x30 && b[2] === 0x78 && b[5] === 0x3e;
}

/** Ollama-only list llama.cpp never reads; kept in step with the reference for Ollama's consumers. */
function appendEndOfTurnEos(t: Translation): void {
  const key = "tokenizer.ggml.eos_token_ids";
  if (arrayKv(t.draft, key) === undefined) {
    t.setArray(key, GgufValueType.INT32, [1, END_OF_TURN_ID]);
    return;
  }
  const ids = flatArray(t, key)!;
  if (ids.itemType !== GgufValueType.INT32 && ids.itemType !== GgufValueType.UINT32) return;
  if (ids.values.includes(END_OF_TURN_ID)) return;
  t.setArray(key, ids.itemType, [...ids.values, END_OF_TURN_ID]);
}

/** A flat (not nested) array KV's item type and items. */
function flatArray(t: Translation, key: string): { itemType: GgufValueType; values: readonly (number | bigint | boolean | string)[] } | undefined {
  const arr = arrayKv(t.draft, key);
  if (arr === undefined || arr.itemType === GgufValueType.ARRAY) return undefined;
  return { itemType: arr.itemType, values: arr.toArray() as (number | bigint | boolean | string)[] };
}
