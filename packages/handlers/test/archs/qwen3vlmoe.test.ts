import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { expectTwinTokens, NO_DIFFERENCES, proveHandler, QWEN_UNUSED_BOS_KEYS } from "../proof";

const dir = tempDir();

describe("qwen3vlmoe handler (Qwen3-VL MoE as Ollama converted it)", () => {
  it("injects the M-RoPE sections and DeepStack count; real llama.cpp generates what the native twin generates", async () => {
    const p = await proveHandler(await dir(), "qwen3vlmoe", {
      seed: 5,
      nativeTwin: true,
      twin: {
        ignoreKeys: [
          ...QWEN_UNUSED_BOS_KEYS,
          // Ollama never wrote it; llama.cpp falls back to feed_forward_length / expert_used_count (32 / 2), the same 16
          "qwen3vlmoe.expert_feed_forward_length",
        ],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen3vlmoe"]);
    const m = p.translatedModel;
    expect(m.getArray("qwen3vlmoe.rope.dimension_sections").toArray()).toEqual([24, 20, 20, 0]);
    expect(m.getU32("qwen3vlmoe.n_deepstack_layers")).toBe(3);
    expect(m.findTensor("blk.0.ffn_gate_exps.weight")?.shape).toEqual([32, 16, 4]);
    expect(m.tensors.some((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    expectTwinTokens(p);
  });
});
