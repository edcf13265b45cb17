import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler, serverTokenize } from "../proof";

const dir = tempDir();
/** The reference-profile 1B output, for the native profile's behavioural comparison. */
let reference1b: string | undefined;

/** What the reference leaves as Ollama wrote it, and why llama.cpp still loads the result. */
const gemma3Twin = {
  ignoreKeys: [
    // Ollama's SentencePiece reader assigned its own scores and token types; the reference keeps them
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    // the reference injects Google's original text-only template where Ollama wrote none; native files carry HF's
    "tokenizer.chat_template",
  ],
};
/** The reference profile keeps one more difference. */
const gemma3ReferenceTwin = {
  ignoreKeys: [
    ...gemma3Twin.ignoreKeys,
    // REFERENCE GAP: Ollama never wrote add_space_prefix and the reference does not add it, so llama.cpp's SPM
    // default (true) applies where the native file says false; the native profile fixes it (gemma3-add-space-prefix)
    "tokenizer.ggml.add_space_prefix",
  ],
};

describe("gemma3 handler", () => {
  it("1B (nested rope keys, no RMS epsilon): loads in real llama.cpp and matches the native twin", async () => {
    const p = await proveHandler(await dir(), "gemma3", { seed: 5, variant: "1b", twin: gemma3ReferenceTwin, profile: "reference" });
    reference1b = p.outPath;
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["gemma3"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["gemma3-add-space-prefix"]);
    expect(p.translatedModel.has("tokenizer.ggml.add_space_prefix")).toBe(false);
    expect(p.translatedModel.getNumber("gemma3.rope.freq_base_swa")).toBe(10_000);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
  });

  it("4B with the vision tower inline: v./mm. hidden, vocab truncated, loads and matches the native text twin", async () => {
    const p = await proveHandler(await dir(), "gemma3", {
      seed: 5,
      variant: "4b-vision",
      // Ollama kept <image_soft_token> in the vocabulary but not its embedding row: the reference truncates the
      // tokenizer to the embedding, one token short of the native file
      profile: "reference",
      twin: { ...gemma3ReferenceTwin, prefixOk: ["tokenizer.ggml.tokens", "token_embd.weight"] },
    });
    expect(p.view.report.tensors.hidden.some((n) => n.startsWith("v."))).toBe(true);
    expect(p.view.report.tensors.hidden.some((n) => n.startsWith("mm."))).toBe(true);
    expect(p.translatedModel.tensors.some((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(false);
    expect(p.translatedModel.getString("gemma3.rope.scaling.type")).toBe("linear");
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
  });

  it("native profile (gemma3-add-space-prefix): real llama.cpp tokenizes like the native twin, the reference output does not", async () => {
    const p = await proveHandler(await dir(), "gemma3", { seed: 5, variant: "1b", twin: gemma3Twin, nativeTwin: true });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["gemma3", "gemma3-add-space-prefix"]]);
    expect(p.translatedModel.getBool("tokenizer.ggml.add_space_prefix")).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const prompt = "Hello world";
    const native = await serverTokenize(p.twin!.paths.text, prompt);
    expect(await serverTokenize(p.outPath, prompt)).toEqual(native);
    const reference = await serverTokenize(reference1b!, prompt);
    expect(reference).not.toEqual(native);
    // the difference is the leading space SentencePiece adds by default
    const text = (ts: typeof native) => ts.map((t) => t.piece).join("");
    expect(native[0]!.piece).toBe("<bos>");
    expect(reference[0]).toEqual(native[0]);
    expect(text(reference.slice(1))).toBe(" " + text(native.slice(1)));
    // and greedy generation from the same prompt follows: native output and twin agree
    const twinLoad = p.twin!.load!;
    expect(p.load.ok && twinLoad.ok ? p.load.tokens : "load failed").toEqual(twinLoad.ok ? twinLoad.tokens : "");
  });
});
