import { GgufValueType, tensorByteSize } from "@compat/gguf";
import { concat, concatPieces } from "@compat/tensor-ops";
import { TranslationError } from "../errors";
import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { blocksWithTensors, intArrayKv, stringArrayKv, stringKv, u32Kv } from "../reads";
import { concatTensors, MAX_JOIN_PIECES } from "../ops";

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
      fuseGateUp(t, b);
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

/**
 * ffn_up becomes [ne0, 2*ne1], gate's rows then up's. The reference joins the two tensors'
 * bytes as they are into ffn_up's type, which is right when both have one type. With two
 * types it is not: halves of the same byte size (F16 and BF16) are joined anyway and one half
 * is read in the other's format; halves of different sizes (Q8_0 and F16) fail its load op,
 * and llama.cpp then reads the enlarged slot from ffn_up's offset on (wrong weights). Under
 * `native` both halves are widened to F32 first (the named fix; the reference's own rule for
 * its other mixed-type merges); under `reference` the raw join is reproduced where it loads,
 * and the size mismatch is refused (a typed error rather than a file of wrong weights).
 */
function fuseGateUp(t: Translation, b: number): void {
  const [gateName, upName] = [`blk.${b}.ffn_gate.weight`, `blk.${b}.ffn_up.weight`];
  const gate = t.draft.findTensor(gateName);
  const up = t.draft.findTensor(upName);
  if (gate === undefined || up === undefined) return;
  let widen = false;
  if (gate.type !== up.type) {
    t.fix({
      name: "glmocr-ffn-gate-up-mixed-types-f32",
      reason:
        "the reference joins ffn_gate and ffn_up's bytes raw into ffn_up's type: with two types one half is read in the other's format (F16 and BF16), or its load op fails and llama.cpp reads the fused slot from the wrong bytes (Q8_0 and F16); both halves are widened to F32 first, values kept",
      needed: () => true,
      apply: () => {
        widen = true;
      },
    });
  }
  if (gate.type === up.type || widen) {
    concatTensors(t, upName, [gateName, upName], 1, "ffn_gate+ffn_up");
    return;
  }
  const shape = [up.shape[0]!, up.shape[1]! * 2, ...up.shape.slice(2)];
  const gateBytes = tensorByteSize(gate.type, gate.shape);
  if (gateBytes !== tensorByteSize(up.type, up.shape)) {
    throw new TranslationError(
      "MIXED_TYPES",
      `${gateName} (type ${gate.type}) and ${upName} (type ${up.type}) differ in size, so the reference's raw gate+up join fails here and llama.cpp would load wrong weights; translate with the native profile, which widens both to F32`,
      { handler: "glmocr", tensor: upName },
    );
  }
  // both halves read with ffn_up's shape and type: a join of their bytes as they are
  const spec = { label: "concat ffn_gate+ffn_up (raw bytes, as the reference)", inputs: [gateName, upName], type: up.type, shape };
  const pieces = concatPieces([up.shape, up.shape], up.type, 1, MAX_JOIN_PIECES);
  if (pieces !== undefined) t.op(upName, { ...spec, join: pieces.pieces });
  else t.op(upName, { ...spec, compute: ([g, u]) => concat([{ data: g!.bytes, shape: u!.shape }, { data: u!.bytes, shape: u!.shape }], up.type, 1).data });
}

/** The id of <|user|> when Ollama's eos_token_ids (from generation_config) lists it. */
function userTurnId(t: Translation): number | undefined {
  const id = stringArrayKv(t.draft, "tokenizer.ggml.tokens")?.indexOf("<|user|>") ?? -1;
  if (id < 0) return undefined;
  return intArrayKv(t.draft, "tokenizer.ggml.eos_token_ids")?.includes(id) ? id : undefined;
}

