import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

describe("glm4moelite handler (GLM-4.7 Flash as Ollama's legacy converter wrote it)", () => {
  it("turns it into deepseek2 with llama.cpp's MLA dims; real llama.cpp loads it; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "glm4moelite", {
      seed: 5,
      sourceDtype: "bf16",
      nativeTwin: true,
      twin: {
        ignoreKeys: [
          // deepseek2 falls back to the length of tokenizer.ggml.tokens, which is the same 154880
          "deepseek2.vocab_size",
          // only the 24 padding entries past the tokenizer differ: Ollama's "[PAD0]".. USER_DEFINED vs
          // llama.cpp's "[PAD154856]".. UNUSED; no text tokenizes to them and the model never emits them
          "tokenizer.ggml.tokens",
          "tokenizer.ggml.token_type",
          // pre-tokenizer glm4 never adds a BOS (add_bos stays false); the chat template writes [gMASK] itself
          "tokenizer.ggml.bos_token_id",
          // byte-level BPE never produces an unknown token
          "tokenizer.ggml.unknown_token_id",
        ],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["glm4moelite"]);
    const m = p.translatedModel;
    expect(m.getString("general.architecture")).toBe("deepseek2");
    expect(m.getU32("deepseek2.attention.head_count_kv")).toBe(1);
    expect(m.getU32("deepseek2.attention.key_length")).toBe(48); // kv_lora 32 + rope 16
    expect(m.getU32("deepseek2.attention.value_length")).toBe(32);
    expect(m.getU32("deepseek2.attention.key_length_mla")).toBe(32); // nope 16 + rope 16
    expect(m.getU32("deepseek2.expert_group_count")).toBe(1);
    expect(m.getU32("tokenizer.ggml.eot_token_id")).toBe(154827); // <|user|>, second of eos_token_ids
    expect(m.getU32("tokenizer.ggml.eom_token_id")).toBe(154829); // <|observation|>, third
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    // The native twin (convert_hf_to_gguf.py --no-mtp) loads, routes the same way and is left alone (nativeTwin).
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens : nativeLoad.error).toEqual(p.load.ok ? p.load.tokens : []);
  });
});
