import { describe, expect, it } from "vitest";
import { generateFixture } from "@compat/testkit";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler, proveNativeTwin } from "../proof";

const dir = tempDir();
let reference: { tokens: number[]; embedding: number[] } | undefined;
let native: { tokens: number[]; embedding: number[] } | undefined;

const twinIgnore = [
  // Ollama's SentencePiece reader typed the special pieces differently (NORMAL/score 0 vs
  // llama.cpp's CONTROL/-1000); the reference leaves tokenizer arrays alone for this arch
  "tokenizer.ggml.scores",
  "tokenizer.ggml.token_type",
];

describe("embeddinggemma handler (EmbeddingGemma as Ollama published it, arch gemma3)", () => {
  it("reference profile: turns it into gemma-embedding; real llama.cpp embeds with it; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "embeddinggemma", {
      seed: 11,
      embedding: true,
      profile: "reference",
      twin: {
        ignoreKeys: [
          ...twinIgnore,
          // Ollama never wrote it and the reference does not inject it, so llama.cpp falls back to
          // its SentencePiece default (true) and prefixes prompts with a space (a tokenization gap
          // the native profile fixes: embeddinggemma-add-space-prefix)
          "tokenizer.ggml.add_space_prefix",
        ],
      },
    });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["embeddinggemma"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["embeddinggemma-add-space-prefix"]);
    const m = p.translatedModel;
    expect(m.getString("general.architecture")).toBe("gemma-embedding");
    expect(m.getU32("gemma-embedding.dense_2_feat_in")).toBe(32);
    expect(m.getU32("gemma-embedding.dense_2_feat_out")).toBe(128);
    expect(m.getU32("gemma-embedding.dense_3_feat_in")).toBe(128);
    expect(m.getU32("gemma-embedding.dense_3_feat_out")).toBe(32);
    expect(m.get("gemma-embedding.attention.causal")).toBeUndefined();
    expect(m.get("gemma-embedding.attention.sliding_window_pattern")).toBeUndefined();
    expect(m.findTensor("dense.0.weight")).toBeUndefined();
    expect(m.has("tokenizer.ggml.add_space_prefix")).toBe(false);
    expect(p.load.ok ? p.load.embedding?.length : p.load.error).toBe(32);
    if (p.load.ok) reference = { tokens: p.load.tokens, embedding: p.load.embedding! };
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("native profile (embeddinggemma-add-space-prefix): matches the native twin's keys; real llama.cpp embeds with it", async () => {
    const p = await proveHandler(await dir(), "embeddinggemma", { seed: 11, embedding: true, twin: { ignoreKeys: twinIgnore } });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["embeddinggemma", "embeddinggemma-add-space-prefix"]]);
    expect(p.translatedModel.getBool("tokenizer.ggml.add_space_prefix")).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.load.ok ? p.load.embedding?.length : p.load.error).toBe(32);
    if (p.load.ok) native = { tokens: p.load.tokens, embedding: p.load.embedding! };
  });

  it("the native twin embeds in llama.cpp exactly like the native profile's output (not the reference's), and is left alone by translate()", async () => {
    const { load } = await proveNativeTwin(await dir(), generateFixture("embeddinggemma", { seed: 11, layout: "native" }), { embedding: true });
    expect(load!.ok ? load!.embedding?.length : load!.error).toBe(32);
    if (!load!.ok) return;
    expect(native).toEqual({ tokens: load!.tokens, embedding: load!.embedding });
    expect(reference!.tokens).not.toEqual(load!.tokens);
    expect(reference!.embedding).not.toEqual(load!.embedding);
  });
});
