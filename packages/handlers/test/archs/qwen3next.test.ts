import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

describe("qwen3next handler", () => {
  it("collapses head_count_kv, renames ssm_dt to ssm_dt.bias; loads in real llama.cpp and matches the native twin", async () => {
    const p = await proveHandler(await dir(), "qwen3next", {
      seed: 5,
      twin: {
        ignoreKeys: [
          // unused: for the qwen2 pre-tokenizer llama.cpp defaults add_bos to false, as the native file states
          "tokenizer.ggml.bos_token_id",
          "tokenizer.ggml.add_bos_token",
        ],
        // Ollama wrote the shared-expert gate as F16 [n_embd]; llama.cpp's converter as F32 [n_embd, 1]. llama.cpp
        // accepts both; the values are equal
        layoutMayDiffer: ["blk.0.ffn_gate_inp_shexp.weight", "blk.1.ffn_gate_inp_shexp.weight"],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen3next"]);
    expect(p.translatedModel.getU32("qwen3next.attention.head_count_kv")).toBeGreaterThan(0);
    expect(p.view.report.tensors.renamed.every((r) => r.to === `${r.from}.bias`)).toBe(true);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
  });
});
