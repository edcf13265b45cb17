import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgufValueType } from "@compat/gguf";
import { generateFixture } from "@compat/testkit";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler, proveNativeTwin, serverStopsAt } from "../proof";

const dir = tempDir();
let translatedTokens: number[] | undefined;
let referenceOut: string | undefined;

const ASSISTANT_END = 24;
const twinIgnore = [
  // u32 array (Ollama) vs i32 array (gguf-py): llama.cpp's get_arr accepts either
  "laguna.attention.head_count",
  // only read for vocabulary-less models (llama_vocab::load); the token list gives the size
  "laguna.vocab_size",
  // llama.cpp's laguna loader never reads the yarn_* keys (only grok and mistral3 do)
  "laguna.rope.scaling.yarn_attn_factor",
  "laguna.rope.scaling.yarn_beta_fast",
  "laguna.rope.scaling.yarn_beta_slow",
  // deliberate in Ollama's converter (its renderer owns prompt formatting); llama.cpp only
  // needs it for chat templating, not to load or generate
  "tokenizer.chat_template",
];

describe("laguna handler (Laguna as Ollama's converter wrote it)", () => {
  it("reference profile: copies the SWA rope keys and renames attn_g; real llama.cpp loads and generates; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "laguna", {
      seed: 9,
      profile: "reference",
      twin: {
        ignoreKeys: [
          ...twinIgnore,
          // reference gap: Ollama wrote eos_token_ids [2, 24] instead of eot_token_id 24 and kept
          // </assistant> USER_DEFINED; the reference fixes neither, so llama.cpp will not stop at
          // </assistant> and prints it as text (native: CONTROL + eot; the native profile fixes it)
          "tokenizer.ggml.eot_token_id",
          "tokenizer.ggml.token_type",
        ],
      },
    });
    referenceOut = p.outPath;
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["laguna"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["laguna-assistant-turn-end"]);
    const m = p.translatedModel;
    expect(m.get("laguna.rope.dimension_count_swa")).toMatchObject({ type: GgufValueType.UINT32, value: 8 });
    expect(m.get("laguna.rope.freq_base_swa")).toMatchObject({ type: GgufValueType.FLOAT32, value: 10000 });
    expect(m.findTensor("blk.0.attn_g.weight")).toBeUndefined();
    expect(m.findTensor("blk.3.attn_gate.weight")?.shape).toEqual([16, 4]);
    // the only token_type difference is the one the reference leaves alone
    const got = m.getNumberArray("tokenizer.ggml.token_type");
    const want = p.native.text.getNumberArray("tokenizer.ggml.token_type");
    expect(got.flatMap((ty, i) => (ty === want[i] ? [] : [i]))).toEqual([24]);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    if (p.load.ok) translatedTokens = p.load.tokens;
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("the native twin loads, generates the same greedy tokens, and is left alone by translate()", async () => {
    const load = (await proveNativeTwin(await dir(), generateFixture("laguna", { seed: 9, layout: "native" }))).load!;
    expect(load.ok ? load.tokens.length : load.error).toBe(4);
    if (load.ok && translatedTokens) expect(load.tokens).toEqual(translatedTokens);
  });

  it("native profile (laguna-assistant-turn-end): real llama.cpp stops at </assistant> like the native twin, not with the reference output", async () => {
    const d = join(await dir(), "native-profile");
    const p = await proveHandler(d, "laguna", { seed: 9, twin: { ignoreKeys: twinIgnore }, nativeTwin: { load: false } });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["laguna", "laguna-assistant-turn-end"]]);
    expect(p.translatedModel.getU32("tokenizer.ggml.eot_token_id")).toBe(ASSISTANT_END);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    // greedy ids are unchanged by the fix (it only decides where generation ends)
    if (p.load.ok && translatedTokens) expect(p.load.tokens).toEqual(translatedTokens);
    // llama-server made to pick </assistant>: an end-of-generation token ends the reply at once, silently
    const twin = await serverStopsAt(p.twin!.paths.text, ASSISTANT_END);
    expect(twin).toEqual({ stopType: "eos", predicted: 1, content: "" });
    expect(await serverStopsAt(p.outPath, ASSISTANT_END)).toEqual(twin);
    // the reference output generates straight through it and prints it
    const reference = await serverStopsAt(referenceOut!, ASSISTANT_END);
    expect(reference.stopType).toBe("limit");
    expect(reference.content).toContain("</assistant>");
  });
});
