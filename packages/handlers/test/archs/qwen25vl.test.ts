import { describe, expect, it } from "vitest";
import { GgufValueType } from "@compat/gguf";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler } from "../proof";

const dir = tempDir();

const twin = {
  ignoreKeys: [
    // unused: for the qwen2 pre-tokenizer llama.cpp adds no BOS, which is what the native file states
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.add_bos_token",
  ],
};

describe("qwen25vl handler (Qwen2.5-VL as Ollama converted it, vision tower inline)", () => {
  it("renames it to qwen2vl with 4 M-RoPE sections; real llama.cpp generates what the native twin generates", async () => {
    const p = await proveHandler(await dir(), "qwen25vl", { seed: 5, nativeTwin: true, twin });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["qwen25vl"]);
    const m = p.translatedModel;
    expect(m.getString("general.architecture")).toBe("qwen2vl");
    const sections = m.getArray("qwen2vl.rope.dimension_sections");
    expect(sections.itemType).toBe(GgufValueType.INT32);
    expect(sections.toArray()).toEqual([2, 3, 3, 0]);
    expect(m.getU32("qwen2vl.block_count")).toBe(2);
    // the old keys stay (llama.cpp never reads them), the tower does not
    expect(m.has("qwen25vl.rope.mrope_section")).toBe(true);
    expect(m.tensors.some((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(false);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
  });

  it("bf16 source: the text weights stay BF16 and equal the native twin's", async () => {
    const p = await proveHandler(await dir(), "qwen25vl", { seed: 6, sourceDtype: "bf16", nativeTwin: true, twin });
    expect(p.translatedModel.findTensor("blk.0.ffn_up.weight")!.type).toBe(30);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const nativeLoad = p.twin!.load!;
    expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
    expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
  });
});
