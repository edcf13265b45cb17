import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgmlType, GgufModel, GgufValueType, readGguf, writeGguf } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { runLoaderInSubprocess } from "@compat/testkit";
import { tempDir } from "../helpers";
import { COMPUTES_DIFFERENTLY, distributionDistance, NO_DIFFERENCES, SAME_COMPUTATION, proveHandler } from "../proof";

const dir = tempDir();
/** The reference profile's output, for the native profile's comparison. */
let referenceOut: string | undefined;

/** What the reference leaves as Ollama wrote it, and why llama.cpp still loads the result. */
const gemma3nTwin = {
  ignoreKeys: [
    // Ollama's SentencePiece reader assigned its own scores and types (the reference only retags <0x..> and <unused..>)
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    // REFERENCE GAP: as for gemma3, Ollama never wrote add_space_prefix and the reference does not add it
    "tokenizer.ggml.add_space_prefix",
    // REFERENCE GAP: Ollama wrote the local rope base as gemma3n.rope.freq_base_local and the reference does not
    // copy it, so llama.cpp's sliding-window layers use freq_base (1e6) instead of 1e4 (see the second test)
    "gemma3n.rope.freq_base_swa",
    // Ollama wrote gemma3n.head_dim instead; llama.cpp's default n_embd / n_head is the same head size
    "gemma3n.attention.key_length",
    "gemma3n.attention.value_length",
    // llama.cpp never reads it (it hard-codes the 0.95 quantile for 10 layers); gonum's float64 quantile and torch's
    // float32 one differ in the last bits
    "gemma3n.activation_sparsity_scale",
  ],
  // The multimodal markers past the per-layer vocabulary are gone: the reference cuts tokens and token_embd to
  // per_layer_token_embd's rows, where llama.cpp's converter pads per_layer_token_embd with zero rows instead
  prefixOk: ["tokenizer.ggml.tokens", "token_embd.weight", "per_layer_token_embd.weight"],
};

describe("gemma3n handler", () => {
  it("cuts every vocab-shaped part to the per-layer rows; loads and generates in real llama.cpp; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "gemma3n", { seed: 5, twin: gemma3nTwin, nativeTwin: true, profile: "reference" });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["gemma3n"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["gemma3n-rope-freq-base-swa", "gemma3n-add-space-prefix"]);
    referenceOut = p.outPath;
    const m = p.translatedModel;
    const rows = p.native.meta.hparams.n_vocab_per_layer as number;
    expect(rows).toBeLessThan(p.native.meta.hparams.n_vocab as number);
    expect(m.findTensor("token_embd.weight")?.shape).toEqual([32, rows]);
    expect(m.findTensor("per_layer_token_embd.weight")?.shape[1]).toBe(rows);
    expect(m.getArray("tokenizer.ggml.tokens").length).toBe(rows);
    expect(m.getArray("tokenizer.ggml.scores").length).toBe(rows);
    expect(m.getString("tokenizer.ggml.model")).toBe("llama");
    // retagged: byte pieces BYTE, reserved <unusedN> NORMAL (Ollama kept them UNUSED)
    const tokens = m.getArray("tokenizer.ggml.tokens").toArray() as string[];
    const types = m.getArray("tokenizer.ggml.token_type").toArray() as number[];
    expect(types.length).toBe(rows);
    expect(types[tokens.indexOf("<0x0A>")]).toBe(6);
    expect(types[tokens.indexOf("<unused0>")]).toBe(1);
    // the Ollama-only EOS list gains the reference's hard-coded 106
    expect(m.getArray("tokenizer.ggml.eos_token_ids").toArray()).toEqual([1, 6, 106]);
    expect(m.findTensor("token_embd.weight")?.type).toBe(GgmlType.F16);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);

    // The two reference gaps are the only behavioural difference: given the native rope base for the sliding-window
    // layers and add_space_prefix = false, the translated file generates exactly the native twin's greedy tokens
    const patched = await readGguf(p.outPath);
    try {
      patched.setF32("gemma3n.rope.freq_base_swa", 10_000);
      patched.setBool("tokenizer.ggml.add_space_prefix", false);
      const patchedPath = join(await dir(), "gemma3n-translated-gaps-closed.gguf");
      await writeGguf(patched, patchedPath);
      const run = await runLoaderInSubprocess(patchedPath, { maxTokens: 4 });
      expect(run.ok ? run.tokens : run.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
      expect(await distributionDistance(patchedPath, p.twin!.paths.text)).toBeLessThan(SAME_COMPUTATION);
    } finally {
      await patched.close();
    }
    // and with the gaps open, the output computes something else than the twin
    expect(await distributionDistance(p.outPath, p.twin!.paths.text)).toBeGreaterThan(COMPUTES_DIFFERENTLY);
  });

  it("native profile (gemma3n-rope-freq-base-swa, gemma3n-add-space-prefix): both keys equal the twin's; real llama.cpp generates the twin's greedy tokens, the reference output computes otherwise", async () => {
    const closed = gemma3nTwin.ignoreKeys.filter((k) => k !== "gemma3n.rope.freq_base_swa" && k !== "tokenizer.ggml.add_space_prefix");
    const p = await proveHandler(join(await dir(), "native-profile"), "gemma3n", { seed: 5, twin: { ...gemma3nTwin, ignoreKeys: closed }, nativeTwin: true });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([
      ["gemma3n", "gemma3n-rope-freq-base-swa"],
      ["gemma3n", "gemma3n-add-space-prefix"],
    ]);
    expect(p.translatedModel.get("gemma3n.rope.freq_base_swa")).toMatchObject({ type: GgufValueType.FLOAT32, value: 10_000 });
    expect(p.translatedModel.getBool("tokenizer.ggml.add_space_prefix")).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const nativeLoad = p.twin!.load!;
    if (!p.load.ok || !nativeLoad.ok) throw new Error("both files must generate");
    expect(p.load.tokens).toHaveLength(4);
    expect(p.load.tokens).toEqual(nativeLoad.tokens);
    if (referenceOut === undefined) throw new Error("run with the reference-profile test");
    expect(await distributionDistance(p.outPath, p.twin!.paths.text)).toBeLessThan(SAME_COMPUTATION);
    expect(await distributionDistance(referenceOut, p.twin!.paths.text)).toBeGreaterThan(COMPUTES_DIFFERENTLY);
  });

  it("EOS list: i32 and u32 lists gain 106 once, a missing one becomes [1, 106], other item types stay; tokenizer model and types", () => {
    const base = () => {
      const m = GgufModel.create({ version: 3, littleEndian: true });
      m.setString("general.architecture", "gemma3n");
      m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, ["<pad>", "<0x41>", "<unused7>", "a", "b"]);
      m.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, [3, 1, 5, 1, 4]);
      m.addTensor({ name: "token_embd.weight", type: GgmlType.F32, shape: [2, 5], data: { kind: "bytes", bytes: new Uint8Array(40) } });
      m.addTensor({ name: "per_layer_token_embd.weight", type: GgmlType.F32, shape: [2, 4], data: { kind: "bytes", bytes: new Uint8Array(32) } });
      return m;
    };
    const eos = (setup: (m: GgufModel) => void) => {
      const m = base();
      setup(m);
      const out = translateModel(m)!.model;
      return { type: out.getArray("tokenizer.ggml.eos_token_ids").itemType, ids: out.getArray("tokenizer.ggml.eos_token_ids").toArray() };
    };
    expect(eos(() => {})).toEqual({ type: GgufValueType.INT32, ids: [1, 106] });
    expect(eos((m) => m.setArray("tokenizer.ggml.eos_token_ids", GgufValueType.UINT32, [1]))).toEqual({ type: GgufValueType.UINT32, ids: [1, 106] });
    expect(eos((m) => m.setArray("tokenizer.ggml.eos_token_ids", GgufValueType.INT32, [106, 1]))).toEqual({ type: GgufValueType.INT32, ids: [106, 1] });
    expect(eos((m) => m.setArray("tokenizer.ggml.eos_token_ids", GgufValueType.FLOAT32, [1]))).toEqual({ type: GgufValueType.FLOAT32, ids: [1] });
    expect(eos((m) => m.setU32("tokenizer.ggml.eos_token_ids", 1))).toEqual({ type: GgufValueType.INT32, ids: [1, 106] });

    const src = base();
    src.setString("tokenizer.ggml.model", "gpt2");
    const out = translateModel(src)!.model;
    expect(out.getString("tokenizer.ggml.model")).toBe("llama");
    expect(out.getArray("tokenizer.ggml.token_type").toArray()).toEqual([3, 6, 1, 1]);
    expect(out.getArray("tokenizer.ggml.tokens").length).toBe(4);
    expect(out.findTensor("token_embd.weight")?.shape).toEqual([2, 4]);
  });

  it("leaves gemma3n files whose embeddings already agree alone", () => {
    const m = GgufModel.create({ version: 3, littleEndian: true });
    m.setString("general.architecture", "gemma3n");
    m.addTensor({ name: "token_embd.weight", type: GgmlType.F32, shape: [2, 4], data: { kind: "bytes", bytes: new Uint8Array(32) } });
    m.addTensor({ name: "per_layer_token_embd.weight", type: GgmlType.F32, shape: [2, 4], data: { kind: "bytes", bytes: new Uint8Array(32) } });
    expect(translateModel(m)).toBeNull();
  });
});
