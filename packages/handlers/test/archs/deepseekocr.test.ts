import { join } from "node:path";
import { GgmlType } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { generateFixture, killAllSpawned, serverCompletion, startLlamaServer, writeFixture } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

const IGNORE_KEYS = [
  // 10000 is llama.cpp's default base, and the only one its deepseek2-ocr graph accepts
  "deepseek2-ocr.rope.freq_base",
  // one group choosing one group is no grouping, the same routing as llama.cpp's default 0
  "deepseek2-ocr.expert_group_count",
  "deepseek2-ocr.expert_group_used_count",
  // without it llama.cpp counts tokenizer.ggml.tokens, the same number
  "deepseek2-ocr.vocab_size",
  // qk_rope_head_dim = 0; the deepseek2-ocr graph rotates the whole head whatever n_rot says
  "deepseek2-ocr.rope.dimension_count",
  // reference gap, kept for equivalence: Ollama's generic "default" pre-tokenizer stays (native: deepseek-v3)
  "tokenizer.ggml.pre",
  // reference gap: Ollama's file has no template (Ollama renders prompts itself); llama.cpp's converter
  // adds a pass-through one, which only matters for chat requests
  "tokenizer.chat_template",
];

describe("deepseekocr handler (DeepSeek-OCR as Ollama's converter wrote it)", () => {
  it.each([
    { variant: "3b", sourceDtype: "bf16" },
    { variant: "3b", sourceDtype: "f16" },
    // quantized by Ollama; the twin is --outtype q8_0 (F16 where rows are not whole Q8_0 blocks, on both sides)
    { variant: "3b-q8_0", sourceDtype: "bf16" },
  ] as const)(
    "$variant ($sourceDtype source): renames to deepseek2-ocr, recovers the expert sizes, hides s./v./mm.; real llama.cpp loads it; matches the native twin",
    async ({ variant, sourceDtype }) => {
      const p = await proveHandler(await dir(), "deepseekocr", { seed: 11, variant, sourceDtype, nativeTwin: true, twin: { ignoreKeys: IGNORE_KEYS } });
      expect(p.view.report.handlers).toEqual([{ name: "deepseekocr", markers: ["architecture deepseekocr"] }]);
      const m = p.translatedModel;
      expect(m.getString("general.architecture")).toBe("deepseek2-ocr");
      expect(m.getU32("deepseek2-ocr.expert_feed_forward_length")).toBe(16); // ne[0] of blk.1.ffn_down_exps
      expect(m.getU32("deepseek2-ocr.expert_shared_count")).toBe(2); // 32-wide shared FFN / 16
      expect(m.getNumber("deepseek2-ocr.attention.layer_norm_rms_epsilon")).toBeCloseTo(1e-6, 12);
      expect(m.getU32("deepseek2-ocr.sam.block_count")).toBe(12); // the clip side's keys ride along under the new prefix
      expect(m.tensors.some((t) => /^(s|v|mm)\./.test(t.name))).toBe(false);
      expect(p.view.report.tensors.hidden.length).toBeGreaterThan(12 * 14);
      if (variant === "3b-q8_0") expect(m.findTensor("blk.1.ffn_up_exps.weight")?.type).toBe(GgmlType.Q8_0);
      expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
      expect(p.diff).toEqual(NO_DIFFERENCES);
      expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
      // The native twin loads, is left alone, and generates the same greedy tokens.
      const nativeLoad = p.twin!.load!;
      expect(nativeLoad.ok ? nativeLoad.tokens : nativeLoad.error).toEqual(p.load.ok ? p.load.tokens : []);
    },
  );
});

describe("deepseekocr in llama-server (upstream llama.cpp from LLAMA_BIN)", () => {
  afterAll(() => killAllSpawned());

  it("serves the translated Q8_0 file, greedy completion equal to the native twin's", async () => {
    const d = await dir();
    const opts = { seed: 11, variant: "3b-q8_0", sourceDtype: "bf16" } as const;
    const ollama = await writeFixture(generateFixture("deepseekocr", { ...opts, layout: "ollama" }), d);
    const view = await translate(ollama.text);
    const translated = join(d, "deepseekocr-q8_0-server.gguf");
    await view!.writeTo(translated);
    await view!.close();
    const native = await writeFixture(generateFixture("deepseekocr", { ...opts, layout: "native" }), d);
    const complete = async (model: string) => {
      const server = await startLlamaServer({ model });
      try {
        return (await serverCompletion(server, { prompt: "Hello" })).tokens;
      } finally {
        await server.stop();
      }
    };
    const tokens = await complete(translated);
    expect(tokens).toHaveLength(4);
    expect(tokens).toEqual(await complete(native.text));
  });
});
