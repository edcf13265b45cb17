import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { generateFixture, killAllSpawned } from "@compat/testkit";
import { tempDir } from "../helpers";
import { expectMtmdEncodesImage, NO_DIFFERENCES, proveHandler, proveNativeTwin, serverPromptEcho, serverTokenize } from "../proof";

const dir = tempDir();
let referenceOut: string | undefined;
afterAll(() => killAllSpawned());

describe("llama4 handler (Llama 4 Maverick-style MoE as Ollama converted it, vision inline)", () => {
  it("reference profile: hides the vision tower; real llama.cpp loads and generates; matches the native twin but for two tokenizer keys", async () => {
    const p = await proveHandler(await dir(), "llama4", {
      seed: 9,
      profile: "reference",
      twin: {
        ignoreKeys: [
          // reference gap: Ollama wrote "default" (Llama 4's pre-tokenizer hash was unknown to it) and the
          // handler keeps it, so llama.cpp splits text with its default BPE regex instead of the llama4 one
          "tokenizer.ggml.pre",
          // reference gap: Ollama wrote add_bos_token = false (tokenizer_config has no add_bos_token);
          // llama.cpp's converter takes true from tokenizer.json's post-processor, so prompts lack BOS
          "tokenizer.ggml.add_bos_token",
        ],
      },
    });
    referenceOut = p.outPath;
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["llama4"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["llama4-pre-tokenizer", "llama4-add-bos"]);
    const m = p.translatedModel;
    expect(m.tensors.some((t) => t.name.startsWith("v.") || t.name.startsWith("mm."))).toBe(false);
    expect(m.findTensor("blk.1.ffn_gate_exps.weight")?.shape).toEqual([32, 32, 4]);
    expect(m.findTensor("blk.0.ffn_gate.weight")?.shape).toEqual([32, 64]);
    expect(m.getString("tokenizer.ggml.pre")).toBe("default");
    expect(m.getBool("tokenizer.ggml.add_bos_token")).toBe(false);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("native profile (llama4-pre-tokenizer, llama4-add-bos): matches the native twin exactly; real llama.cpp tokenizes like it, the reference output does not", async () => {
    const p = await proveHandler(join(await dir(), "native-profile"), "llama4", { seed: 9, nativeTwin: true });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([
      ["llama4", "llama4-pre-tokenizer"],
      ["llama4", "llama4-add-bos"],
    ]);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    // add_bos: the twin and the native output start with <|begin_of_text|>, the reference output does not
    const prompt = "Hello world 12345";
    const native = await serverTokenize(p.twin!.paths.text, prompt);
    expect(native[0]!.piece).toBe("<|begin_of_text|>");
    expect(await serverTokenize(p.outPath, prompt)).toEqual(native);
    expect(await serverTokenize(referenceOut!, prompt)).toEqual(native.slice(1));
    // pre-tokenizer: llama.cpp's "llama4" type (GPT-4o rules) keeps spaces before punctuation when it detokenizes,
    // "default" cleans them up. (The fixture's toy merges never span the two regexes' split points, so token ids
    // alone cannot show the regex difference.)
    const text = "hello , world .";
    const echoed = await serverPromptEcho(p.twin!.paths.text, text);
    expect(echoed).toBe("<|begin_of_text|>" + text);
    expect(await serverPromptEcho(p.outPath, text)).toBe(echoed);
    expect(await serverPromptEcho(referenceOut!, text)).toBe("hello, world.");
    const twinLoad = p.twin!.load!;
    expect(p.load.ok && twinLoad.ok ? p.load.tokens : "load failed").toEqual(twinLoad.ok ? twinLoad.tokens : "");
  });

  it("the native twin (text + llama4 mmproj): loads, is left alone by translate(), and llama-mtmd-cli runs it", async () => {
    const d = join(await dir(), "native");
    const { paths: native, load } = await proveNativeTwin(d, generateFixture("llama4", { seed: 9, layout: "native" }));
    expect(load!.ok ? load!.tokens.length : load!.error).toBe(4);
    await expectMtmdEncodesImage(native, { side: 32, level: 128 }, "llama4");
  });
});
