// A header shaped like a modern large-vocabulary model, for benchmarks.
import { GgmlType, GgufModel, GgufValueType } from "../src/index";

export const VOCAB = 262_144;
export const MERGES = 500_000;
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

/** Byte-level-BPE-looking tokens: mostly ASCII pieces, many with a "Ġ" word prefix, some CJK. */
function makeVocab(): { tokens: string[]; merges: string[] } {
  const rnd = lcg(42);
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const piece = (min: number, max: number) => {
    const n = min + Math.floor(rnd() * (max - min + 1));
    let s = "";
    for (let i = 0; i < n; i++) s += letters[Math.floor(rnd() * letters.length)];
    return s;
  };
  const tokens: string[] = [];
  const seen = new Set<string>();
  while (tokens.length < VOCAB) {
    const r = rnd();
    const t = r < 0.45 ? `Ġ${piece(1, 9)}` : r < 0.9 ? piece(1, 10) : r < 0.97 ? String.fromCodePoint(0x4e00 + Math.floor(rnd() * 20000)) + piece(0, 2) : `<|special_${tokens.length}|>`;
    if (!seen.has(t)) {
      seen.add(t);
      tokens.push(t);
    }
  }
  const merges: string[] = new Array(MERGES);
  for (let i = 0; i < MERGES; i++) merges[i] = `${tokens[Math.floor(rnd() * 50000)]} ${tokens[Math.floor(rnd() * 50000)]}`;
  return { tokens, merges };
}

export function buildModel(): GgufModel {
  const { tokens, merges } = makeVocab();
  const m = GgufModel.create();
  m.setString("general.architecture", "llama");
  m.setString("general.name", "bench vocabulary");
  m.setU32("llama.block_count", 32);
  m.setU32("llama.context_length", 131072);
  m.setU32("llama.embedding_length", 4096);
  m.setF32("llama.rope.freq_base", 500000);
  m.setString("tokenizer.ggml.model", "gpt2");
  m.setString("tokenizer.ggml.pre", "llama-bpe");
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, tokens);
  const scores = new Float32Array(VOCAB);
  for (let i = 0; i < VOCAB; i++) scores[i] = -i;
  m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, scores);
  m.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, Int32Array.from({ length: VOCAB }, (_, i) => (i % 1000 === 0 ? 3 : 1)));
  m.setArray("tokenizer.ggml.merges", GgufValueType.STRING, merges);
  m.setString("tokenizer.chat_template", "{% for message in messages %}{{ message['content'] }}{% endfor %}");
  // A realistic tensor table (tiny shapes keep the file small; the header is what we time).
  for (let b = 0; b < 32; b++) {
    for (const n of ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]) {
      m.addTensor({ name: `blk.${b}.${n}.weight`, type: GgmlType.F32, shape: [8], data: { kind: "bytes", bytes: new Uint8Array(32) } });
    }
  }
  return m;
}

