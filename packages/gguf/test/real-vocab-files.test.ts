// The vocabulary GGUFs shipped in the llama.cpp tree (written by its converter through
// gguf-py, real tokenizers up to 262k tokens) parse and rewrite byte for byte.
import { existsSync, readdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgufValueType, readGguf, serializeGguf } from "@compat/gguf";
import { expectSameBytes } from "./helpers/bytes";

const MODELS = process.env.LLAMA_CPP_SRC ? join(process.env.LLAMA_CPP_SRC, "models") : "/work/llama.cpp-src/models";
const files = existsSync(MODELS) ? readdirSync(MODELS).filter((f) => /^ggml-vocab-.*\.gguf$/.test(f)) : [];

describe.skipIf(files.length === 0)("llama.cpp's own vocab GGUFs", () => {
  it.each(files)("%s", async (f) => {
    const path = join(MODELS, f);
    const m = await readGguf(path);
    try {
      const tokens = m.getArray("tokenizer.ggml.tokens", GgufValueType.STRING);
      expect(tokens.length).toBeGreaterThan(1000);
      expect(typeof tokens.at(tokens.length - 1)).toBe("string");
      expectSameBytes(await serializeGguf(m), new Uint8Array(await readFile(path)));
    } finally {
      await m.close();
    }
  });
});
