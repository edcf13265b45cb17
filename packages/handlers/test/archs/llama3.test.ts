import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

describe("llama3-metadata handler (Llama 3 as Ollama converted it)", () => {
  it("fixes the tokenizer metadata; real llama.cpp loads and generates; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "llama", {
      seed: 7,
      variant: "llama3-metadata-gap",
      twin: {
        ignoreKeys: [
          // reference gap: Ollama wrote add_bos_token = false (tokenizer_config has no add_bos_token) and the
          // reference keeps it; the native file says true (tokenizer.json's post-processor), so prompts lack BOS
          "tokenizer.ggml.add_bos_token",
          // deliberate: the reference points EOS at <|eot_id|> (128009) so chats stop; the base
          // converter keeps <|end_of_text|> and relies on llama.cpp marking <|eot_id|> as EOG
          "tokenizer.ggml.eos_token_id",
        ],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["llama3-metadata"]);
    expect(p.translatedModel.getString("tokenizer.ggml.pre")).toBe("llama-bpe");
    expect(p.translatedModel.getU32("tokenizer.ggml.eos_token_id")).toBe(128009);
    expect(p.translatedModel.getBool("tokenizer.ggml.add_bos_token")).toBe(false);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });
});
