/**
 * A tiny F32 llama-arch GGUF built with @compat/gguf, used to prove the harness
 * on its own (the fixture generator proves the per-arch fixtures). SPM
 * vocabulary including the 256 byte tokens, which llama.cpp needs for byte
 * fallback. `arch` and `headCountKv` let tests make files llama.cpp rejects
 * (unknown architecture) or aborts on (zero KV heads).
 */
import { GgmlType, GgufModel, GgufValueType, writeGguf } from "@compat/gguf";

export interface TinyLlamaOptions {
  arch?: string;
  headCountKv?: number;
  seed?: number;
}

const N_EMBD = 64;
const N_FF = 128;
const N_HEAD = 4;

export async function writeTinyLlama(path: string, options: TinyLlamaOptions = {}): Promise<void> {
  const { arch = "llama", headCountKv = N_HEAD, seed = 1 } = options;
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [2, 3, 3]; // unknown, control, control
  for (let i = 0; i < 256; i++) {
    tokens.push(`<0x${i.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6); // byte
  }
  for (const word of ["▁Hello", "▁world", "▁the", "▁a", "▁cat", "▁dog", "▁", "H", "e", "l", "o"]) {
    tokens.push(word);
    types.push(1); // normal
  }

  const model = GgufModel.create()
    .setString("general.architecture", arch)
    .setString("general.name", "tiny")
    .setU32(`${arch}.block_count`, 1)
    .setU32(`${arch}.context_length`, 256)
    .setU32(`${arch}.embedding_length`, N_EMBD)
    .setU32(`${arch}.feed_forward_length`, N_FF)
    .setU32(`${arch}.attention.head_count`, N_HEAD)
    .setU32(`${arch}.attention.head_count_kv`, headCountKv)
    .setF32(`${arch}.attention.layer_norm_rms_epsilon`, 1e-5)
    .setU32(`${arch}.rope.dimension_count`, N_EMBD / N_HEAD)
    .setString("tokenizer.ggml.model", "llama")
    .setArray("tokenizer.ggml.tokens", GgufValueType.STRING, tokens)
    .setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, tokens.map((_, i) => -i))
    .setArray("tokenizer.ggml.token_type", GgufValueType.INT32, types)
    .setU32("tokenizer.ggml.bos_token_id", 1)
    .setU32("tokenizer.ggml.eos_token_id", 2)
    .setU32("tokenizer.ggml.unknown_token_id", 0);

  let state = seed >>> 0 || 1;
  const random = () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 0x1_0000_0000 - 0.5;
  };
  const add = (name: string, shape: number[]) => {
    const values = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < values.length; i++) values[i] = name.includes("norm") ? 1 : random() * 0.2;
    model.addTensor({ name, type: GgmlType.F32, shape, data: { kind: "bytes", bytes: new Uint8Array(values.buffer) } });
  };
  add("token_embd.weight", [N_EMBD, tokens.length]);
  add("output_norm.weight", [N_EMBD]);
  add("output.weight", [N_EMBD, tokens.length]);
  add("blk.0.attn_norm.weight", [N_EMBD]);
  for (const part of ["q", "k", "v", "output"]) add(`blk.0.attn_${part}.weight`, [N_EMBD, N_EMBD]);
  add("blk.0.ffn_norm.weight", [N_EMBD]);
  add("blk.0.ffn_gate.weight", [N_EMBD, N_FF]);
  add("blk.0.ffn_up.weight", [N_EMBD, N_FF]);
  add("blk.0.ffn_down.weight", [N_FF, N_EMBD]);
  await writeGguf(model, path);
}
