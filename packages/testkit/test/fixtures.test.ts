import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { GgmlType, GgufValueType, parseGguf, serializeGguf, type GgufModel } from "@compat/gguf";
import {
  allFixtureVariants,
  quantizedFixtureVariants,
  compareBytewise,
  FIXTURE_ARCHS,
  generateFixture,
  generateFixtureSpecs,
  ollamaBlockIndex,
  type FixtureLayout,
  type FixtureOptions,
} from "@compat/testkit";

const DIGESTS_PATH = fileURLToPath(new URL("./fixtures-digests.json", import.meta.url));
const LAYOUTS: FixtureLayout[] = ["ollama", "native"];
const CASES = allFixtureVariants().flatMap((v) => LAYOUTS.map((layout) => ({ ...v, layout })));
/** The quantized fixtures (Ollama's Q4_K_M files and their llama-quantize twins), by digest key. */
const QUANT_CASES = quantizedFixtureVariants().flatMap((c) =>
  LAYOUTS.map((layout) => ({ key: `${c.arch}/${c.variant}/${layout}/${c.quant}${c.bf16Towers ? "/bf16towers" : ""}`, opts: { ...c, layout } })),
);

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

async function digestOf(arch: string, variant: string, layout: FixtureLayout, seed: number, extra: Omit<FixtureOptions, "seed" | "layout" | "variant"> = {}): Promise<string> {
  // a turn of the event loop per fixture: the loop over all of them (K-quant encoding in JS)
  // would otherwise hold this worker for longer than vitest's RPC to it may wait
  await new Promise((resolve) => setTimeout(resolve, 0));
  const f = generateFixture(arch, { seed, layout, variant, ...extra });
  const text = sha256(await serializeGguf(f.text));
  return f.mmproj ? `${text} mmproj:${sha256(await serializeGguf(f.mmproj))}` : text;
}

/** Parse what we would write, so the checks see the file, not our in-memory model. */
async function roundTrip(m: GgufModel): Promise<{ model: GgufModel; bytes: Uint8Array }> {
  const bytes = await serializeGguf(m);
  return { model: parseGguf(bytes), bytes };
}

function kvKeys(m: GgufModel): string[] {
  return m.kvs().map((kv) => kv.key);
}

describe("fixture determinism", () => {
  it.each(CASES)("$arch/$variant/$layout: same seed, same bytes; other seed, other bytes", async ({ arch, variant, layout }) => {
    const a = await serializeGguf(generateFixture(arch, { seed: 7, layout, variant }).text);
    const b = await serializeGguf(generateFixture(arch, { seed: 7, layout, variant }).text);
    const c = await serializeGguf(generateFixture(arch, { seed: 8, layout, variant }).text);
    expect(sha256(a)).toBe(sha256(b));
    expect(sha256(c)).not.toBe(sha256(a));
  });

  // A changed digest means the bytes of a fixture changed: intended changes rewrite the file
  // with UPDATE_FIXTURE_DIGESTS=1 (and the diff shows which fixtures moved).
  it("matches the committed digests (seed 1); set UPDATE_FIXTURE_DIGESTS=1 to rewrite them", async () => {
    const actual: Record<string, string> = {};
    for (const { arch, variant, layout } of CASES) actual[`${arch}/${variant}/${layout}`] = await digestOf(arch, variant, layout, 1);
    for (const { key, opts } of QUANT_CASES) {
      const { arch, variant, layout, ...extra } = opts;
      actual[key] = await digestOf(arch, variant, layout, 1, extra);
    }
    if (process.env.UPDATE_FIXTURE_DIGESTS === "1") {
      // committed order first (a diff shows only what moved), new fixtures after
      const previous = JSON.parse(readFileSync(DIGESTS_PATH, "utf8")) as Record<string, string>;
      const order = [...Object.keys(previous).filter((k) => k in actual), ...Object.keys(actual).filter((k) => !(k in previous))];
      writeFileSync(DIGESTS_PATH, JSON.stringify(Object.fromEntries(order.map((k) => [k, actual[k]])), null, 2) + "\n");
    }
    const committed = JSON.parse(readFileSync(DIGESTS_PATH, "utf8")) as Record<string, string>;
    const missing = Object.keys(actual).filter((k) => !(k in committed));
    expect(missing, "fixtures without a committed digest: run with UPDATE_FIXTURE_DIGESTS=1").toEqual([]);
    for (const [k, v] of Object.entries(committed)) if (k in actual) expect(actual[k], k).toBe(v);
  });
});

describe("ollama layout structure", () => {
  const ollamaCases = CASES.filter((c) => c.layout === "ollama");

  it.each(ollamaCases)("$arch/$variant: tensors sorted by block index, then name", async ({ arch, variant }) => {
    const { model } = await roundTrip(generateFixture(arch, { seed: 1, layout: "ollama", variant }).text);
    const names = model.tensors.map((t) => t.name);
    const blockOf = (n: string) => {
      const m = /^blk\.(\d+)\./.exec(n);
      return m ? Number(m[1]) : Infinity;
    };
    for (let i = 1; i < names.length; i++) {
      const [a, b] = [names[i - 1]!, names[i]!];
      const ok = blockOf(a) < blockOf(b) || (blockOf(a) === blockOf(b) && a < b);
      expect(ok, `${a} before ${b}`).toBe(true);
    }
  });

  it.each(ollamaCases)("$arch/$variant: KVs sorted by the key the converter stored", async ({ arch, variant }) => {
    const spec = generateFixtureSpecs(arch, { seed: 1, layout: "ollama", variant }).text;
    const { model } = await roundTrip(generateFixture(arch, { seed: 1, layout: "ollama", variant }).text);
    // Some converters (qwen3next) stored arch keys unprefixed; the writer added the prefix after sorting.
    const stored = (k: string) => spec.ollamaSortKeys.get(k) ?? k;
    const keys = kvKeys(model).map(stored);
    expect(keys).toEqual([...keys].sort(compareBytewise));
  });

  it("qwen3next: arch keys interleave with general.* as their unprefixed names sort", async () => {
    const keys = kvKeys(generateFixture("qwen3next", { seed: 1, layout: "ollama" }).text);
    expect(keys.indexOf("qwen3next.block_count")).toBeLessThan(keys.indexOf("general.architecture"));
    expect(keys.indexOf("qwen3next.ssm.conv_kernel")).toBeGreaterThan(keys.indexOf("general.architecture"));
  });

  it.each(ollamaCases)("$arch/$variant: 32-byte aligned data, no general.alignment", async ({ arch, variant }) => {
    const { model, bytes } = await roundTrip(generateFixture(arch, { seed: 1, layout: "ollama", variant }).text);
    expect(model.has("general.alignment")).toBe(false);
    expect(model.get("general.file_type")).toMatchObject({ type: GgufValueType.UINT32 });
    expect(model.get("general.quantization_version")).toMatchObject({ type: GgufValueType.UINT32, value: 2 });
    for (const t of model.tensors) {
      if (t.data.kind !== "range") throw new Error("parsed tensors are ranges");
      expect(t.data.offset % 32, t.name).toBe(0);
    }
    expect(model.tensors.length).toBeGreaterThan(0);
    expect(bytes.length % 32).toBe(0);
  });

  it("ollamaBlockIndex reads blk.N. like Go's Sscanf and sends the rest last", () => {
    expect(ollamaBlockIndex("blk.12.attn_q.weight")).toBe(12);
    expect(ollamaBlockIndex("v.blk.0.attn_q.weight")).toBe(Infinity);
    expect(ollamaBlockIndex("token_embd.weight")).toBe(Infinity);
  });
});

describe("per-arch quirks", () => {
  it.each(["llama", "gemma3", "qwen3next"])("%s: general.file_type 1 whatever the tensor types", async (arch) => {
    const { model } = await roundTrip(generateFixture(arch, { seed: 1, layout: "ollama", sourceDtype: "bf16" }).text);
    expect(model.get("general.file_type")).toMatchObject({ type: GgufValueType.UINT32, value: 1 });
    expect(model.tensors.some((t) => t.type === GgmlType.BF16)).toBe(true);
  });

  it("llama3: Llama 3 specials at their real ids, gpt2 BPE with merges, scores are ids", async () => {
    const { model } = await roundTrip(generateFixture("llama", { seed: 1, layout: "ollama" }).text);
    const tokens = model.getStringArray("tokenizer.ggml.tokens");
    expect(tokens).toHaveLength(128256);
    expect(tokens[128000]).toBe("<|begin_of_text|>");
    expect(tokens[128006]).toBe("<|start_header_id|>");
    expect(tokens[128009]).toBe("<|eot_id|>");
    expect(model.getString("tokenizer.ggml.model")).toBe("gpt2");
    expect(model.getString("tokenizer.ggml.pre")).toBe("llama-bpe");
    expect(model.getStringArray("tokenizer.ggml.merges").length).toBeGreaterThan(100);
    expect(model.getNumberArray("tokenizer.ggml.scores").slice(0, 3)).toEqual([0, 1, 2]);
    expect(model.getNumber("tokenizer.ggml.eos_token_id")).toBe(128009);
    expect(model.getNumberArray("tokenizer.ggml.eos_token_ids")).toEqual([128001, 128008, 128009]);
    expect(model.get("tokenizer.ggml.eos_token_ids")?.value).toMatchObject({ itemType: GgufValueType.INT32 });
    expect(model.getNumber("llama.attention.head_dim")).toBe(8);
    expect(model.findTensor("rope_freqs.weight")).toMatchObject({ type: GgmlType.F32, shape: [4] });
    expect(model.findTensor("output.weight")).toBeUndefined();
  });

  it("llama3-metadata-gap: default pre-tokenizer and <|end_of_text|> eos", async () => {
    const { model } = await roundTrip(generateFixture("llama", { seed: 1, layout: "ollama", variant: "llama3-metadata-gap" }).text);
    expect(model.getString("tokenizer.ggml.pre")).toBe("default");
    expect(model.getNumber("tokenizer.ggml.eos_token_id")).toBe(128001);
    expect(model.has("tokenizer.ggml.eos_token_ids")).toBe(false);
    expect(model.getStringArray("tokenizer.ggml.tokens")[128009]).toBe("<|eot_id|>");
  });

  it("gemma3 1b: rope.local.freq_base, bool sliding-window pattern, no v./mm. tensors", async () => {
    const { model } = await roundTrip(generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "1b" }).text);
    expect(model.has("gemma3.rope.local.freq_base")).toBe(true);
    expect(model.has("gemma3.rope.freq_base_swa")).toBe(false);
    expect(model.get("gemma3.attention.sliding_window_pattern")?.value).toMatchObject({ itemType: GgufValueType.BOOL, length: 2 });
    expect(model.tensors.some((t) => /^(v|mm)\./.test(t.name))).toBe(false);
    expect(model.has("tokenizer.chat_template")).toBe(false);
  });

  it("gemma3 4b-vision: embedded tower, no rms eps, one token past the embedding rows", async () => {
    const { model } = await roundTrip(generateFixture("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }).text);
    expect(model.has("gemma3.attention.layer_norm_rms_epsilon")).toBe(false);
    expect(model.getNumber("gemma3.mm.tokens_per_image")).toBe(4);
    const rows = model.tensor("token_embd.weight").shape[1]!;
    const tokens = model.getStringArray("tokenizer.ggml.tokens");
    expect(tokens).toHaveLength(rows + 1);
    expect(tokens.at(-1)).toBe("<image_soft_token>");
    expect(model.tensor("v.patch_embedding.weight")).toMatchObject({ type: GgmlType.F16, shape: [8, 8, 3, 48] });
    expect(model.tensor("v.position_embedding.weight").type).toBe(GgmlType.F16);
    expect(model.tensor("v.blk.0.mlp.fc1.weight").shape).toEqual([48, 96]);
    expect(model.tensor("mm.mm_input_projection.weight").shape).toEqual([32, 48]);
    expect(model.hasTensor("mm.mm_soft_emb_norm.weight")).toBe(true);
    // the text tensors come first (blk.*), the tower sorts among the non-block tensors
    expect(model.tensors[0]!.name.startsWith("blk.0.")).toBe(true);
  });

  it("gemma3 4b-vision native: text file without the tower plus a clip mmproj", async () => {
    const f = generateFixture("gemma3", { seed: 1, layout: "native", variant: "4b-vision" });
    expect(f.text.tensors.some((t) => /^(v|mm)\./.test(t.name))).toBe(false);
    expect(f.text.getString("gemma3.rope.scaling.type")).toBe("linear");
    const mm = f.mmproj!;
    expect(mm.getString("general.architecture")).toBe("clip");
    expect(mm.getString("clip.projector_type")).toBe("gemma3");
    expect(mm.getNumber("clip.vision.projection_dim")).toBe(f.text.getNumber("gemma3.embedding_length"));
    expect(mm.tensor("v.patch_embd.weight").type).toBe(GgmlType.F32);
    expect(mm.tensor("mm.input_projection.weight").type).toBe(GgmlType.F16);
    expect(mm.tensor("v.blk.0.ffn_up.weight").shape).toEqual([48, 96]);
  });

  it("qwen3next: head_count_kv array and ssm_dt without .bias (ollama) vs scalar and ssm_dt.bias (native)", async () => {
    const { model: o } = await roundTrip(generateFixture("qwen3next", { seed: 1, layout: "ollama" }).text);
    expect(o.get("qwen3next.attention.head_count_kv")?.value).toMatchObject({ itemType: GgufValueType.UINT32 });
    expect(o.getNumberArray("qwen3next.attention.head_count_kv")).toEqual([0, 1]);
    expect(o.hasTensor("blk.0.ssm_dt")).toBe(true);
    expect(o.hasTensor("blk.0.ssm_dt.bias")).toBe(false);
    expect(o.tensor("blk.0.ffn_gate_inp_shexp.weight")).toMatchObject({ type: GgmlType.F16, shape: [32] });
    const n = generateFixture("qwen3next", { seed: 1, layout: "native" }).text;
    expect(n.getNumber("qwen3next.attention.head_count_kv")).toBe(1);
    expect(n.hasTensor("blk.0.ssm_dt.bias")).toBe(true);
    expect(n.tensor("blk.0.ffn_gate_inp_shexp.weight")).toMatchObject({ type: GgmlType.F32, shape: [32, 1] });
  });

  it("qwen35moe 35b-a3b: MTP head under HF names, per-expert MTP experts, vision tower (ollama) vs block 2 (native)", async () => {
    const { model: o } = await roundTrip(generateFixture("qwen35moe", { seed: 1, layout: "ollama" }).text);
    expect(o.getNumber("qwen35moe.block_count")).toBe(2);
    expect(o.has("qwen35moe.nextn_predict_layers")).toBe(false);
    expect(o.getNumberArray("qwen35moe.rope.dimension_sections")).toEqual([2, 1, 1]);
    expect(o.tensor("mtp.fc.weight")).toMatchObject({ type: GgmlType.F16, shape: [64, 32] });
    expect(o.tensor("mtp.layers.0.mlp.experts.3.down_proj.weight")).toMatchObject({ type: GgmlType.F16, shape: [32, 32] });
    expect(o.tensor("mtp.layers.0.attn_norm.weight").type).toBe(GgmlType.F32);
    expect(o.tensor("v.patch_embed.weight")).toMatchObject({ type: GgmlType.F16, shape: [16, 16, 2, 96] });
    expect(o.tensor("v.blk.0.attn_q.bias").type).toBe(GgmlType.F32);
    expect(o.tensor("v.pos_embed.weight").type).toBe(GgmlType.F16);
    expect(o.tensor("blk.0.ffn_gate_inp_shexp.weight")).toMatchObject({ type: GgmlType.F16, shape: [32, 1] });
    const n = generateFixture("qwen35moe", { seed: 1, layout: "native" }).text;
    expect([n.getNumber("qwen35moe.block_count"), n.getNumber("qwen35moe.nextn_predict_layers")]).toEqual([3, 1]);
    expect(n.tensor("blk.2.ffn_down_exps.weight").shape).toEqual([32, 32, 4]);
    expect(n.tensor("blk.2.nextn.enorm.weight").type).toBe(GgmlType.F32);
    expect(n.tensors.some((t) => /^(v|mm|mtp)\./.test(t.name))).toBe(false);
  });
});

describe("both layouts carry the same weights", () => {
  it.each(CASES.filter((c) => c.layout === "native"))("$arch/$variant: shared tensors have identical bytes when the dtype agrees", ({ arch, variant }) => {
    const o = generateFixtureSpecs(arch, { seed: 3, layout: "ollama", variant }).text;
    const native = generateFixtureSpecs(arch, { seed: 3, layout: "native", variant });
    const n = native.text;
    const reordered = new Set(native.meta.reorderedTensors ?? []);
    let compared = 0;
    for (const t of n.tensors) {
      const twin = o.tensor(t.name);
      if (!twin || twin.type !== t.type || twin.bytes.length !== t.bytes.length) continue;
      if (reordered.has(t.name)) {
        expect(Buffer.from(twin.bytes).equals(Buffer.from(t.bytes)), `${t.name} is declared reordered`).toBe(false);
        continue;
      }
      expect(Buffer.from(twin.bytes).equals(Buffer.from(t.bytes)), t.name).toBe(true);
      compared++;
    }
    expect(compared).toBeGreaterThan(5);
  });

  it("bf16 sources give BF16 text matrices in both layouts, F16 for Ollama's vision tower", () => {
    const o = generateFixtureSpecs("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision", sourceDtype: "bf16" }).text;
    expect(o.tensor("blk.0.attn_q.weight")!.type).toBe(GgmlType.BF16);
    expect(o.tensor("v.blk.0.attn_q.weight")!.type).toBe(GgmlType.F16);
    expect(o.tensor("blk.0.attn_norm.weight")!.type).toBe(GgmlType.F32);
    const n = generateFixtureSpecs("gemma3", { seed: 1, layout: "native", variant: "4b-vision", sourceDtype: "bf16" });
    expect(n.text.tensor("blk.0.attn_q.weight")!.type).toBe(GgmlType.BF16);
    expect(n.text.get("general.file_type")).toMatchObject({ value: 32 });
  });
});

describe("registry", () => {
  it("lists each arch once, each with its default among its variants and documented quirks", () => {
    const archs = FIXTURE_ARCHS.map((d) => d.arch);
    expect(new Set(archs).size).toBe(archs.length);
    expect(archs).toEqual(expect.arrayContaining(["llama", "gemma3", "qwen3next"]));
    for (const d of FIXTURE_ARCHS) {
      expect(d.variants.map((v) => v.name)).toContain(d.defaultVariant);
      const documented = new Set(d.quirks.map((q) => q.id));
      for (const v of d.variants) {
        const meta = generateFixtureSpecs(d.arch, { seed: 1, layout: "ollama", variant: v.name }).meta;
        for (const q of meta.quirks) expect(documented.has(q), `${d.arch}: ${q}`).toBe(true);
      }
    }
  });

  it("rejects unknown archs and variants with a helpful message", () => {
    expect(() => generateFixture("nosuch", { seed: 1, layout: "native" })).toThrow(/have: llama/);
    expect(() => generateFixture("gemma3", { seed: 1, layout: "native", variant: "27b" })).toThrow(/1b, 4b-vision/);
  });
});

describe("quantized fixtures (Ollama's Q4_K_M files and their twins)", () => {
  const float = new Set([GgmlType.F32, GgmlType.F16, GgmlType.BF16]);
  const cases = quantizedFixtureVariants().map((c) => ({ opts: c, arch: c.arch, variant: c.variant, quant: c.quant, towers: c.bf16Towers ? "BF16 towers" : "towers as converted" }));
  it.each(cases)("$arch/$variant $quant, $towers: file type Q4_K_M, whole blocks, the twin's tensors of one name quantized alike", ({ opts }) => {
    const ollama = generateFixture(opts.arch, { seed: 2, layout: "ollama", ...opts });
    const native = generateFixture(opts.arch, { seed: 2, layout: "native", ...opts });
    for (const m of [ollama.text, native.text]) expect(m.getNumber("general.file_type")).toBe(15);
    const quantized = ollama.text.tensors.filter((t) => !float.has(t.type));
    expect(quantized.length).toBeGreaterThan(0);
    let agree = 0;
    for (const t of [...native.text.tensors, ...(native.mmproj?.tensors ?? [])]) {
      const o = ollama.text.findTensor(t.name);
      if (o === undefined || float.has(o.type) || o.shape.join() !== t.shape.join()) continue;
      expect(t.type, t.name).toBe(o.type);
      agree++;
    }
    expect(agree).toBeGreaterThan(0);
  });
});
