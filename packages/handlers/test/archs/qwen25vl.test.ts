import { describe, expect, it } from "vitest";
import { GgufModel, GgufValueType } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { addF32, tempDir } from "../helpers";
import { expectTwinTokens, NO_DIFFERENCES, proveHandler, QWEN_UNUSED_BOS_KEYS } from "../proof";

const dir = tempDir();

const twin = { ignoreKeys: [...QWEN_UNUSED_BOS_KEYS] };

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

    expectTwinTokens(p);
  });

  it("bf16 source: the text weights stay BF16 and equal the native twin's", async () => {
    const p = await proveHandler(await dir(), "qwen25vl", { seed: 6, sourceDtype: "bf16", nativeTwin: true, twin });
    expect(p.translatedModel.findTensor("blk.0.ffn_up.weight")!.type).toBe(30);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expectTwinTokens(p);
  });
});

describe("qwen25vl handler: the reference's conditions, on small synthetic models", () => {
  it("renames without mrope_section (no sections key), pads from the first 3 of a longer one, never touches qwen2vl files", () => {
    const base = (edit: (m: GgufModel) => void) => {
      const m = GgufModel.create();
      m.setString("general.architecture", "qwen25vl");
      m.setU32("qwen25vl.block_count", 1);
      edit(m);
      addF32(m, "token_embd.weight", [4, 4]);
      return m;
    };
    const none = translateModel(base(() => {}))!.model;
    expect(none.getString("general.architecture")).toBe("qwen2vl");
    expect(none.getU32("qwen2vl.block_count")).toBe(1);
    expect(none.has("qwen2vl.rope.dimension_sections")).toBe(false);
    const longer = translateModel(base((m) => m.setArray("qwen25vl.rope.mrope_section", GgufValueType.INT32, [4, 6, 6, 2])))!.model;
    expect(longer.getArray("qwen2vl.rope.dimension_sections").toArray()).toEqual([4, 6, 6, 0]);
    const native = GgufModel.create();
    native.setString("general.architecture", "qwen2vl");
    addF32(native, "token_embd.weight", [4, 4]);
    expect(translateModel(native)).toBeNull();
  });
});
