// The vocabulary GGUFs shipped in the llama.cpp tree (written by its converter through
// gguf-py, real tokenizers up to 262k tokens) parse and rewrite byte for byte.
import { existsSync, readdirSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgufValueType, readGguf, serializeGguf } from "@compat/gguf";
import { llamaCppSourceDir } from "@compat/testkit";
import { expectSameBytes } from "../../../gguf/test/helpers/bytes";

// The tree scripts/build-llama-tools.sh checks out; a missing tree is a failure, not a skip.
const SRC = await llamaCppSourceDir();
const MODELS = SRC !== undefined ? join(SRC, "models") : "";
const files = existsSync(MODELS) ? readdirSync(MODELS).filter((f) => /^ggml-vocab-.*\.gguf$/.test(f)) : [];

describe("llama.cpp's own vocab GGUFs", () => {
  it("are there to read", () => {
    expect(files.length, `no ggml-vocab-*.gguf under ${MODELS || "(llama.cpp source not found)"}`).toBeGreaterThan(10);
  });

  it.each(files)("%s parses and rewrites byte for byte", async (f) => {
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
