// llama.cpp itself (C++ gguf.cpp + llama_model_loader, via llama-quantize) reads a model we
// wrote, and writes a GGUF that we then read and rewrite byte for byte.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, GgufValueType, readGguf, readTensorData, serializeGguf, writeGguf, type GgufTensor } from "@compat/gguf";
import { runLlamaQuantize } from "@compat/testkit";

const EMBD = 64;
const FF = 128;
const VOCAB = 32;

function f32Tensor(name: string, shape: number[], seed: number): GgufTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const values = new Float32Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    values[i] = (x / 2 ** 31 - 0.5) * 0.2;
  }
  return { name, type: GgmlType.F32, shape, data: { kind: "bytes", bytes: new Uint8Array(values.buffer) } };
}

/** The smallest llama the loader accepts: one block, F32 weights. */
function tinyLlama(): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "llama");
  m.setString("general.name", "tiny test llama");
  m.setU32("general.file_type", 0);
  m.setU32("llama.context_length", 64);
  m.setU32("llama.embedding_length", EMBD);
  m.setU32("llama.block_count", 1);
  m.setU32("llama.feed_forward_length", FF);
  m.setU32("llama.attention.head_count", 4);
  m.setU32("llama.attention.head_count_kv", 4);
  m.setU32("llama.rope.dimension_count", EMBD / 4);
  m.setF32("llama.attention.layer_norm_rms_epsilon", 1e-5);
  m.setString("tokenizer.ggml.model", "llama");
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, Array.from({ length: VOCAB }, (_, i) => (i < 3 ? ["<unk>", "<s>", "</s>"][i]! : `t${i}`)));
  m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, new Float32Array(VOCAB));
  m.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, Int32Array.from({ length: VOCAB }, (_, i) => (i < 3 ? 3 : 1)));
  let seed = 1;
  const add = (name: string, shape: number[]) => m.addTensor(f32Tensor(name, shape, seed++));
  add("token_embd.weight", [EMBD, VOCAB]);
  add("output_norm.weight", [EMBD]);
  add("output.weight", [EMBD, VOCAB]);
  add("blk.0.attn_norm.weight", [EMBD]);
  add("blk.0.attn_q.weight", [EMBD, EMBD]);
  add("blk.0.attn_k.weight", [EMBD, EMBD]);
  add("blk.0.attn_v.weight", [EMBD, EMBD]);
  add("blk.0.attn_output.weight", [EMBD, EMBD]);
  add("blk.0.ffn_norm.weight", [EMBD]);
  add("blk.0.ffn_gate.weight", [EMBD, FF]);
  add("blk.0.ffn_up.weight", [EMBD, FF]);
  add("blk.0.ffn_down.weight", [FF, EMBD]);
  return m;
}

function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

function dequantQ8_0(bytes: Uint8Array): Float32Array {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array((bytes.length / 34) * 32);
  for (let b = 0; b < bytes.length / 34; b++) {
    const d = f16ToF32(dv.getUint16(b * 34, true));
    for (let i = 0; i < 32; i++) out[b * 32 + i] = d * dv.getInt8(b * 34 + 2 + i);
  }
  return out;
}

describe("interop with llama.cpp (llama-quantize)", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "gguf-llama-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("llama.cpp loads a model we wrote, and we read back and rewrite what it wrote", async () => {
    const ours = tinyLlama();
    const input = join(dir, "tiny-f32.gguf");
    const output = join(dir, "tiny-q8_0.gguf");
    await writeGguf(ours, input);
    const run = await runLlamaQuantize(input, output, "Q8_0");
    expect(run.stderr + run.stdout).not.toMatch(/failed|error/i);
    expect(run.ok).toBe(true);

    const written = await readGguf(output);
    try {
      expect(written.getString("general.architecture")).toBe("llama");
      expect(written.getU32("general.file_type")).toBe(7);
      expect(written.getStringArray("tokenizer.ggml.tokens")).toEqual(ours.getStringArray("tokenizer.ggml.tokens"));
      // (llama-quantize reorders tensors, so compare as sets)
      const infos = (m: GgufModel) => m.tensors.map((t) => `${t.name} [${t.shape.join(",")}]`).sort();
      expect(infos(written)).toEqual(infos(ours));
      const q = written.tensor("blk.0.attn_q.weight");
      expect(q.type).toBe(GgmlType.Q8_0);
      expect(written.tensor("output_norm.weight").type).toBe(GgmlType.F32);
      // llama.cpp saw our bytes at our offsets: its quantization dequantizes to our weights.
      const original = new Float32Array((await readTensorData(ours.tensor("blk.0.attn_q.weight"))).slice().buffer);
      const roundTripped = dequantQ8_0(await readTensorData(q));
      let maxErr = 0;
      for (let i = 0; i < original.length; i++) maxErr = Math.max(maxErr, Math.abs(original[i]! - roundTripped[i]!));
      expect(maxErr).toBeLessThan(0.002);
      expect(await readTensorData(written.tensor("output_norm.weight"))).toEqual(await readTensorData(ours.tensor("output_norm.weight")));
      // A file written by llama.cpp's gguf.cpp is canonical: our rewrite is identical.
      expect(await serializeGguf(written)).toEqual(new Uint8Array(await readFile(output)));
    } finally {
      await written.close();
    }
  });
});
