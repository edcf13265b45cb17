import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { translate } from "@compat/handlers";
import { generateFixture, writeFixture } from "@compat/testkit";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler, serverTokenize } from "../proof";

const dir = tempDir();
let referenceOut: string | undefined;

// deliberate: the reference points EOS at <|eot_id|> (128009) so chats stop; the base
// converter keeps <|end_of_text|> and relies on llama.cpp marking <|eot_id|> as EOG
const EOS = "tokenizer.ggml.eos_token_id";

describe("llama3-metadata handler (Llama 3 as Ollama converted it)", () => {
  it("reference profile: fixes the tokenizer metadata; real llama.cpp loads and generates; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "llama", {
      seed: 7,
      variant: "llama3-metadata-gap",
      profile: "reference",
      twin: {
        ignoreKeys: [
          // reference gap: Ollama wrote add_bos_token = false (tokenizer_config has no add_bos_token) and the
          // reference keeps it; the native file says true (tokenizer.json's post-processor), so prompts lack BOS
          "tokenizer.ggml.add_bos_token",
          EOS,
        ],
      },
    });
    referenceOut = p.outPath;
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["llama3-metadata"]);
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["llama3-add-bos"]);
    expect(p.translatedModel.getString("tokenizer.ggml.pre")).toBe("llama-bpe");
    expect(p.translatedModel.getU32("tokenizer.ggml.eos_token_id")).toBe(128009);
    expect(p.translatedModel.getBool("tokenizer.ggml.add_bos_token")).toBe(false);
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBeGreaterThan(0);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("native profile (llama3-add-bos): real llama.cpp adds <|begin_of_text|> like the native twin, not with the reference output", async () => {
    const p = await proveHandler(join(await dir(), "native-profile"), "llama", {
      seed: 7,
      variant: "llama3-metadata-gap",
      twin: { ignoreKeys: [EOS] },
      nativeTwin: true,
    });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["llama3-metadata", "llama3-add-bos"]]);
    expect(p.translatedModel.getBool("tokenizer.ggml.add_bos_token")).toBe(true);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const prompt = "Hello world";
    const native = await serverTokenize(p.twin!.paths.text, prompt);
    expect(native[0]!.piece).toBe("<|begin_of_text|>");
    expect(await serverTokenize(p.outPath, prompt)).toEqual(native);
    const reference = await serverTokenize(referenceOut!, prompt);
    expect(reference).toEqual(native.slice(1));
    const twinLoad = p.twin!.load!;
    expect(p.load.ok && twinLoad.ok ? p.load.tokens : "load failed").toEqual(twinLoad.ok ? twinLoad.tokens : "");
  });

  it("native profile on a Llama 3 file the reference passes through (pre llama-bpe, eos <|eot_id|>): only llama3-add-bos; real llama.cpp then tokenizes like the twin", async () => {
    const d = join(await dir(), "passthrough");
    const ollama = await writeFixture(generateFixture("llama", { seed: 7, layout: "ollama", variant: "llama3" }), d);
    expect(await translate(ollama.text, { profile: "reference" })).toBeNull();
    const p = await proveHandler(d, "llama", { seed: 7, variant: "llama3", twin: { ignoreKeys: [EOS] }, nativeTwin: { load: false } });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["llama3-metadata"]);
    expect(p.view.report.fixes.map((f) => f.name)).toEqual(["llama3-add-bos"]);
    expect(p.view.report.kv).toEqual({ added: [], changed: ["tokenizer.ggml.add_bos_token"], removed: [] });
    expect(p.diff).toEqual(NO_DIFFERENCES);
    const prompt = "Hello world";
    const native = await serverTokenize(p.twin!.paths.text, prompt);
    expect(native[0]!.piece).toBe("<|begin_of_text|>");
    expect(await serverTokenize(p.outPath, prompt)).toEqual(native);
    // what llama.cpp does with the file as Ollama wrote it (and as the reference leaves it)
    expect(await serverTokenize(ollama.text, prompt)).toEqual(native.slice(1));
  });
});
