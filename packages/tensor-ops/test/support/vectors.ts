import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

export interface DequantVectors {
  type: number;
  small: { seed: number; nElements: number; input: string; output: string };
  bulk: { seed: number; nElements: number; outputSha256: string };
  quantized: { nElements: number; input: string; outputSha256: string };
}

export interface ReferenceVectors {
  types: { id: number; name: string; blockSize: number; blockBytes: number; hasToFloat: boolean }[];
  dequant: Record<string, DequantVectors>;
  f16ToF32AllSha256: string;
  bf16ToF32AllSha256: string;
  fromF32: {
    randomSeed: number;
    randomCount: number;
    edges: string;
    F16: Record<string, string>;
    BF16: Record<string, string>;
  };
}

export const reference = JSON.parse(
  readFileSync(new URL("../vectors/ggml-reference.json", import.meta.url), "utf8"),
) as ReferenceVectors;

export const fromB64 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "base64"));
export const sha256 = (b: ArrayBufferView): string =>
  createHash("sha256").update(new Uint8Array(b.buffer, b.byteOffset, b.byteLength)).digest("hex");
export const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
