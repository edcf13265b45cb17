import { describe, expect, it } from "vitest";
import { generateFixture } from "@compat/testkit";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler, proveNativeTwin } from "../proof";

const dir = tempDir();
let translatedTokens: number[] | undefined;

describe("lfm2 handler (LFM2 as Ollama's first lfm2 converter wrote it)", () => {
  it("renames the final norm, sets the pre-tokenizer, fixes the ffn length; llama.cpp loads it; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "lfm2", {
      seed: 3,
      twin: {
        ignoreKeys: [
          // u32 array (Ollama) vs i32 array (gguf-py): llama.cpp's get_arr accepts either for its u32 per-layer counts
          "lfm2.attention.head_count_kv",
        ],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["lfm2"]);
    const m = p.translatedModel;
    expect(m.findTensor("output_norm.weight")).toBeUndefined();
    expect(m.findTensor("token_embd_norm.weight")?.shape).toEqual([16]);
    expect(m.getString("tokenizer.ggml.pre")).toBe("lfm2");
    // the source claimed intermediate_size (48); the ffn_gate tensors are 32 wide
    expect(m.getU32("lfm2.feed_forward_length")).toBe(32);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    if (p.load.ok) translatedTokens = p.load.tokens;
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("the native twin loads, generates the same greedy tokens, and is left alone by translate()", async () => {
    const load = (await proveNativeTwin(await dir(), generateFixture("lfm2", { seed: 3, layout: "native" }))).load!;
    expect(load.ok ? load.tokens.length : load.error).toBe(4);
    if (load.ok && translatedTokens) expect(load.tokens).toEqual(translatedTokens);
  });
});
