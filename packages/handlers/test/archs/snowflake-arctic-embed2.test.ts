import { describe, expect, it } from "vitest";
import { GgufValueType } from "@compat/gguf";
import { generateFixture, runLoaderInSubprocess } from "@compat/testkit";
import { tempDir } from "../helpers";
import { NO_DIFFERENCES, proveHandler, proveNativeTwin } from "../proof";

const dir = tempDir();
const CHARSMAP = "tokenizer.ggml.precompiled_charsmap";
let translatedEmbedding: number[] | undefined;

describe("snowflake-arctic-embed2 handler (bert + t5 tokenizer, charsmap as base64 characters)", () => {
  it("decodes the charsmap to bytes; real llama.cpp embeds with it; matches the native twin", async () => {
    const p = await proveHandler(await dir(), "bert", { seed: 13, variant: "snowflake-arctic-embed2", embedding: true });
    expect(p.view.report.handlers.map((h) => h.name)).toEqual(["snowflake-arctic-embed2"]);
    const m = p.translatedModel;
    const charsmap = m.getArray(CHARSMAP);
    expect(charsmap.itemType).toBe(GgufValueType.UINT8);
    // u32 xcda size (256 entries) + the array + " \0"
    expect(charsmap.length).toBe(4 + 1024 + 2);
    expect(p.load.ok ? p.load.embedding?.length : p.load.error).toBe(16);
    if (p.load.ok) translatedEmbedding = p.load.embedding;
    // the decoded charsmap is the one llama.cpp normalizes with: it maps U+00A0 to a space
    const tokens = m.getStringArray("tokenizer.ggml.tokens");
    const nbsp = await runLoaderInSubprocess(p.outPath, { embedding: true, prompt: "hello\u00a0world" });
    expect(nbsp.ok ? nbsp.tokens : nbsp.error).toEqual([tokens.indexOf("\u2581hello"), tokens.indexOf("\u2581world")]);
    expect(p.diff).toEqual(NO_DIFFERENCES);
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  });

  it("the native twin embeds identically in llama.cpp and is left alone by translate()", async () => {
    const native = generateFixture("bert", { seed: 13, variant: "snowflake-arctic-embed2", layout: "native" });
    const load = (await proveNativeTwin(await dir(), native, { embedding: true })).load!;
    expect(load.ok ? load.embedding?.length : load.error).toBe(16);
    if (load.ok && translatedEmbedding) expect(load.embedding).toEqual(translatedEmbedding);
  });
});
