/**
 * A minimal, self-contained writer for a tiny F32 llama-arch GGUF, used only to
 * prove the harness until @compat/gguf's writer and the fixture generator land.
 * SPM vocabulary with the 256 byte tokens (llama.cpp needs them for byte fallback).
 */
import { writeFile } from "node:fs/promises";

export interface TinyLlamaOptions {
  arch?: string;
  headCountKv?: number;
  seed?: number;
}

export async function writeTinyLlama(path: string, options: TinyLlamaOptions = {}): Promise<void> {
  const { arch = "llama", headCountKv = 4, seed = 1 } = options;
  const nEmbd = 64, nFf = 128, nHead = 4, nLayer = 1;
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [2, 3, 3];
  for (let i = 0; i < 256; i++) {
    tokens.push(`<0x${i.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6);
  }
  for (const word of ["▁Hello", "▁world", "▁the", "▁a", "▁cat", "▁dog", "▁", "H", "e", "l", "o"]) {
    tokens.push(word);
    types.push(1);
  }
  const nVocab = tokens.length;

  const parts: Buffer[] = [];
  const u32 = (v: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b); };
  const i32 = (v: number) => { const b = Buffer.alloc(4); b.writeInt32LE(v); parts.push(b); };
  const u64 = (v: number) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); parts.push(b); };
  const f32 = (v: number) => { const b = Buffer.alloc(4); b.writeFloatLE(v); parts.push(b); };
  const str = (s: string) => { const b = Buffer.from(s, "utf8"); u64(b.length); parts.push(b); };

  type Kv = [string, "u32", number] | [string, "f32", number] | [string, "str", string] | [string, "strs", string[]] | [string, "f32s" | "i32s", number[]];
  const kvs: Kv[] = [
    ["general.architecture", "str", arch],
    ["general.name", "str", "tiny"],
    [`${arch}.block_count`, "u32", nLayer],
    [`${arch}.context_length`, "u32", 256],
    [`${arch}.embedding_length`, "u32", nEmbd],
    [`${arch}.feed_forward_length`, "u32", nFf],
    [`${arch}.attention.head_count`, "u32", nHead],
    [`${arch}.attention.head_count_kv`, "u32", headCountKv],
    [`${arch}.attention.layer_norm_rms_epsilon`, "f32", 1e-5],
    [`${arch}.rope.dimension_count`, "u32", nEmbd / nHead],
    ["tokenizer.ggml.model", "str", "llama"],
    ["tokenizer.ggml.tokens", "strs", tokens],
    ["tokenizer.ggml.scores", "f32s", tokens.map((_, i) => -i)],
    ["tokenizer.ggml.token_type", "i32s", types],
    ["tokenizer.ggml.bos_token_id", "u32", 1],
    ["tokenizer.ggml.eos_token_id", "u32", 2],
    ["tokenizer.ggml.unknown_token_id", "u32", 0],
  ];
  const tensors: Array<[string, number[]]> = [
    ["token_embd.weight", [nEmbd, nVocab]],
    ["output_norm.weight", [nEmbd]],
    ["output.weight", [nEmbd, nVocab]],
  ];
  for (let l = 0; l < nLayer; l++) {
    tensors.push(
      [`blk.${l}.attn_norm.weight`, [nEmbd]],
      [`blk.${l}.attn_q.weight`, [nEmbd, nEmbd]],
      [`blk.${l}.attn_k.weight`, [nEmbd, nEmbd]],
      [`blk.${l}.attn_v.weight`, [nEmbd, nEmbd]],
      [`blk.${l}.attn_output.weight`, [nEmbd, nEmbd]],
      [`blk.${l}.ffn_norm.weight`, [nEmbd]],
      [`blk.${l}.ffn_gate.weight`, [nEmbd, nFf]],
      [`blk.${l}.ffn_up.weight`, [nEmbd, nFf]],
      [`blk.${l}.ffn_down.weight`, [nFf, nEmbd]],
    );
  }

  parts.push(Buffer.from("GGUF"));
  u32(3);
  u64(tensors.length);
  u64(kvs.length);
  for (const [key, kind, value] of kvs) {
    str(key);
    switch (kind) {
      case "u32": u32(4); u32(value as number); break;
      case "f32": u32(6); f32(value as number); break;
      case "str": u32(8); str(value as string); break;
      case "strs": u32(9); u32(8); u64((value as string[]).length); (value as string[]).forEach(str); break;
      case "f32s": u32(9); u32(6); u64((value as number[]).length); (value as number[]).forEach(f32); break;
      case "i32s": u32(9); u32(5); u64((value as number[]).length); (value as number[]).forEach(i32); break;
    }
  }

  let state = seed >>> 0 || 1;
  const random = () => {
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state / 0x1_0000_0000 - 0.5;
  };
  const align = (n: number) => Math.ceil(n / 32) * 32;
  const data: Buffer[] = [];
  let offset = 0;
  for (const [name, shape] of tensors) {
    str(name);
    u32(shape.length);
    shape.forEach(u64);
    u32(0); // F32
    u64(offset);
    const count = shape.reduce((a, b) => a * b, 1);
    const bytes = Buffer.alloc(align(count * 4));
    for (let i = 0; i < count; i++) bytes.writeFloatLE(name.includes("norm") ? 1 : random() * 0.2, i * 4);
    data.push(bytes);
    offset += bytes.length;
  }
  const headerLength = parts.reduce((n, b) => n + b.length, 0);
  parts.push(Buffer.alloc(align(headerLength) - headerLength), ...data);
  await writeFile(path, Buffer.concat(parts));
}
