/**
 * The testkit's block quantizers against the real thing: llama-quantize (no imatrix, so
 * ggml's reference quantizers, as Ollama's Go quantizer calls them) writes each test
 * tensor in one type, and the bytes must equal encodeAs(type, the same F32 values).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, GgufValueType, readGguf, readTensorData, writeGguf } from "@compat/gguf";
import { encodeAs, encodeF16, killAllSpawned, Prng, runLlamaQuantize, type FloatEncoding } from "@compat/testkit";

const N_EMBD = 256;
const N_ROWS = 64;

/** Each test tensor: its llama name, the type llama-quantize is told to write, and its values. */
const CASES: Array<{ name: string; type: FloatEncoding; typeName: string }> = [
  { name: "blk.0.attn_q.weight", type: GgmlType.Q4_K, typeName: "q4_k" },
  { name: "blk.0.attn_k.weight", type: GgmlType.Q5_K, typeName: "q5_k" },
  { name: "blk.0.attn_v.weight", type: GgmlType.Q6_K, typeName: "q6_k" },
  { name: "blk.0.attn_output.weight", type: GgmlType.Q5_0, typeName: "q5_0" },
  { name: "blk.0.ffn_gate.weight", type: GgmlType.Q5_1, typeName: "q5_1" },
  { name: "blk.0.ffn_up.weight", type: GgmlType.Q8_0, typeName: "q8_0" },
  { name: "blk.0.ffn_down.weight", type: GgmlType.Q6_K, typeName: "q6_k" },
  { name: "output.weight", type: GgmlType.Q4_K, typeName: "q4_k" },
];

/**
 * Rows that reach the quantizers' corner cases: all zero, constant, a lone outlier,
 * one sign only, values under GROUP_MAX_EPS, halves of an F16 step, then plain noise.
 */
function values(name: string, count: number): Float32Array {
  const rng = Prng.forLabel(7, name);
  const out = new Float32Array(count);
  for (let r = 0; r < count / N_EMBD; r++) {
    for (let c = 0; c < N_EMBD; c++) {
      const i = r * N_EMBD + c;
      const u = rng.symmetric(1);
      switch (r % 8) {
        case 0: out[i] = 0; break;
        case 1: out[i] = 0.25; break;
        case 2: out[i] = c === 77 ? 40 : u * 0.01; break;
        case 3: out[i] = Math.abs(u) * 0.3; break;
        case 4: out[i] = -Math.abs(u) * 0.3; break;
        case 5: out[i] = u * 1e-17; break;
        case 6: out[i] = c < 32 ? 0 : u * 2; break;
        default: out[i] = u * (1 + (c % 5));
      }
    }
  }
  // what the quantizer sees: the F16 values the source file holds
  const f16 = encodeF16(out);
  return out.map((_, i) => halfValue(f16, i));
}

function halfValue(bytes: Uint8Array, i: number): number {
  const h = bytes[2 * i]! | (bytes[2 * i + 1]! << 8);
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "testkit-kquants-"));
});
afterAll(async () => {
  killAllSpawned();
  await rm(dir, { recursive: true, force: true });
});

async function writeF16Llama(path: string, tensors: Map<string, Float32Array>): Promise<void> {
  const tokens = ["<unk>", "<s>", "</s>", ...Array.from({ length: 256 }, (_, i) => `<0x${i.toString(16).toUpperCase().padStart(2, "0")}>`)];
  tokens.push(...Array.from({ length: N_ROWS - (tokens.length % N_ROWS) }, (_, i) => `▁w${i}`));
  const m = GgufModel.create()
    .setString("general.architecture", "llama")
    .setU32("llama.block_count", 1)
    .setU32("llama.context_length", 256)
    .setU32("llama.embedding_length", N_EMBD)
    .setU32("llama.feed_forward_length", N_EMBD)
    .setU32("llama.attention.head_count", 4)
    .setU32("llama.attention.head_count_kv", 4)
    .setF32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    .setU32("llama.rope.dimension_count", 64)
    .setU32("general.file_type", 1)
    .setString("tokenizer.ggml.model", "llama")
    .setArray("tokenizer.ggml.tokens", GgufValueType.STRING, tokens)
    .setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, tokens.map((_, i) => -i))
    .setArray("tokenizer.ggml.token_type", GgufValueType.INT32, tokens.map((_, i) => (i < 3 ? 3 : i < 259 ? 6 : 1)));
  const norm = new Float32Array(N_EMBD).fill(1);
  const add = (name: string, shape: number[], v: Float32Array, type = GgmlType.F16) =>
    m.addTensor({ name, type, shape, data: { kind: "bytes", bytes: type === GgmlType.F16 ? encodeF16(v) : new Uint8Array(v.buffer) } });
  add("token_embd.weight", [N_EMBD, tokens.length], new Float32Array(N_EMBD * tokens.length).fill(0.01));
  add("output_norm.weight", [N_EMBD], norm, GgmlType.F32);
  add("blk.0.attn_norm.weight", [N_EMBD], norm, GgmlType.F32);
  add("blk.0.ffn_norm.weight", [N_EMBD], norm, GgmlType.F32);
  for (const [name, v] of tensors) add(name, name === "output.weight" ? [N_EMBD, tokens.length] : [N_EMBD, N_ROWS], v);
  await writeGguf(m, path);
}

describe("the testkit's block quantizers equal llama-quantize's", () => {
  it("Q4_K, Q5_K, Q6_K, Q5_0, Q5_1 and Q8_0, byte for byte, on rows that reach their corner cases", async () => {
    const nOutputRows = 3 + 256 + (N_ROWS - (259 % N_ROWS));
    const tensors = new Map(CASES.map((c) => [c.name, values(c.name, N_EMBD * (c.name === "output.weight" ? nOutputRows : N_ROWS))]));
    const input = join(dir, "f16.gguf");
    const output = join(dir, "quantized.gguf");
    await writeF16Llama(input, tensors);
    const overrides = CASES.flatMap((c) => ["--tensor-type", `^${c.name.replace(/\./g, "\\.")}$=${c.typeName}`]);
    const run = await runLlamaQuantize(input, output, "Q4_K_M", { args: ["--token-embedding-type", "f16", ...overrides] });
    expect(run.ok, run.stderr.slice(-2000)).toBe(true);
    const q = await readGguf(output);
    try {
      for (const c of CASES) {
        const t = q.findTensor(c.name)!;
        expect(t.type, c.name).toBe(c.type);
        const ours = encodeAs(c.type, tensors.get(c.name)!);
        const theirs = await readTensorData(t);
        let firstDiff = -1;
        for (let i = 0; i < ours.length && firstDiff < 0; i++) if (ours[i] !== theirs[i]) firstDiff = i;
        expect({ tensor: c.name, length: theirs.length, firstDiff }).toEqual({ tensor: c.name, length: ours.length, firstDiff: -1 });
      }
    } finally {
      await q.close();
    }
  });
});
