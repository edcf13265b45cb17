import { describe, expect, it } from "vitest";
import { GgmlType } from "@compat/gguf";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

describe("gptoss handler (gpt-oss as Ollama's legacy converter wrote it)", () => {
  it("renames the arch and tensors, fills the missing hparams; real llama.cpp loads it; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "gptoss", {
      seed: 11,
      sourceDtype: "bf16",
      nativeTwin: true,
      twin: {
        ignoreKeys: [
          // llama.cpp's defaults (32 and 1) are exactly gpt-oss's values, so the missing keys change nothing
          "gpt-oss.rope.scaling.yarn_beta_fast",
          "gpt-oss.rope.scaling.yarn_beta_slow",
          // Ollama hard-coded <|endoftext|> (199999) where the native file has <|return|> (200002); the
          // reference keeps it, and llama.cpp marks <|return|>, <|call|> and <|endoftext|> as EOG by their text
          "tokenizer.ggml.eos_token_id",
        ],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["gptoss"]);
    const m = p.translatedModel;
    expect(m.getString("general.architecture")).toBe("gpt-oss");
    expect(m.getU32("gpt-oss.expert_feed_forward_length")).toBe(32);
    expect(m.getString("gpt-oss.rope.scaling.type")).toBe("yarn");
    expect(m.getString("tokenizer.ggml.pre")).toBe("gpt-4o");
    expect(m.findTensor("blk.1.attn_output.bias")).toBeDefined();
    expect(m.findTensor("blk.1.attn_sinks.weight")?.shape).toEqual([4]);
    expect(m.findTensor("blk.1.post_attention_norm.weight")).toBeDefined();
    expect(m.findTensor("blk.0.ffn_down_exps.weight")?.type).toBe(GgmlType.MXFP4);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    // The native twin is what llama.cpp itself loads, and no handler touches it (nativeTwin).
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens : nativeLoad.error).toEqual(p.load.ok ? p.load.tokens : []);
  });
});
