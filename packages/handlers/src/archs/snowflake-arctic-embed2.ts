import { GgufValueType } from "@compat/gguf";
import type { Handler } from "../handler";
import { arrayKv, stringArrayKv, stringKv } from "../reads";

const CHARSMAP = "tokenizer.ggml.precompiled_charsmap";
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/**
 * Strict base64 as the reference decodes it: standard alphabet, stops at the first
 * "=", anything else (whitespace included) fails. Returns null on failure.
 */
function decodeBase64Strict(text: string): Uint8Array | null {
  const out: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const ch of text) {
    if (ch === "=") break;
    const v = B64.indexOf(ch);
    if (v < 0) return null;
    acc = ((acc << 6) | v) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push((acc >> bits) & 0xff);
    }
  }
  return new Uint8Array(out);
}

/**
 * Ollama's early converter stored Snowflake Arctic Embed 2's SentencePiece charsmap as
 * the characters of its base64 text, one string per character; llama.cpp's UGM
 * tokenizer wants the raw bytes as a u8 array.
 */
export const snowflakeArcticEmbed2: Handler = {
  name: "snowflake-arctic-embed2",
  arch: "bert",
  detect(m) {
    if (stringKv(m, "tokenizer.ggml.model") !== "t5") return null;
    if (arrayKv(m, CHARSMAP)?.itemType !== GgufValueType.STRING) return null;
    return ["tokenizer.ggml.model t5", "precompiled_charsmap stored as a string array"];
  },
  apply(t) {
    const chars = stringArrayKv(t.draft, CHARSMAP);
    // Each item must be exactly one character; otherwise the file is left as it is.
    if (chars === undefined || chars.some((c) => c.length !== 1)) return;
    const bytes = decodeBase64Strict(chars.join(""));
    if (bytes === null || bytes.length === 0) return;
    t.setArray(CHARSMAP, GgufValueType.UINT8, Array.from(bytes));
  },
};
