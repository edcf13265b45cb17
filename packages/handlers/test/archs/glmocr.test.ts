import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, GgufValueType, readGguf, readTensorData } from "@compat/gguf";
import { translate, translateModel, type TranslationProfile } from "@compat/handlers";
import { generateFixture, killAllSpawned, writeFixture } from "@compat/testkit";
import { addF32, tempDir } from "../helpers";
import { COMPUTES_DIFFERENTLY, distributionDistance, expectServerAnswersLikeTwin, proveHandler, serverStopsAt, type HandlerProof } from "../proof";
import type { TwinOptions } from "../twin";

const dir = tempDir();
afterAll(() => killAllSpawned());
const BLOCKS = 2;

/** What the translation cannot match in the native twin, each with its reason. */
const REFERENCE_GAPS: TwinOptions = {
  ignoreKeys: [
    // Ollama dropped the NextN layer, so 2 blocks and no nextn keys; llama.cpp skips that layer anyway
    "glm4.block_count",
    "glm4.nextn_predict_layers",
    // the reference forces chatglm-bpe; llama.cpp maps glm4 and chatglm-bpe to the same pre-tokenizer
    "tokenizer.ggml.pre",
    // the chatglm4 pre-tokenizer drops BOS; Ollama wrote no unk (byte-level BPE never needs it)
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.unknown_token_id",
    // reference gap: no eot_token_id (<|user|>), so generation does not stop at the next user turn
    // (the native profile fixes it: glmocr-user-turn-end)
    "tokenizer.ggml.eot_token_id",
  ],
};
/** The same without the gap the native profile closes. */
const NATIVE_GAPS: TwinOptions = { ignoreKeys: REFERENCE_GAPS.ignoreKeys!.filter((k) => k !== "tokenizer.ggml.eot_token_id") };
/** F16 reference output of seed 5, for the native profile's comparison. */
let referenceOut: string | undefined;
const NEXTN_TENSORS = [
  "attn_norm", "ffn_down", "ffn_up", "post_attention_norm", "post_ffw_norm", "ffn_norm", "attn_k", "attn_output", "attn_q", "attn_v",
  "nextn.eh_proj", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm",
].map((n) => `blk.${BLOCKS}.${n}.weight`);

// ---- an F32 reading of the source written here, independent of @compat/tensor-ops --------------

function f16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function decode(type: number, bytes: Uint8Array): number[] {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: number[] = [];
  if (type === GgmlType.F32) for (let i = 0; i < bytes.length; i += 4) out.push(dv.getFloat32(i, true));
  else if (type === GgmlType.F16) for (let i = 0; i < bytes.length; i += 2) out.push(f16(dv.getUint16(i, true)));
  else if (type === GgmlType.BF16) for (let i = 0; i < bytes.length; i += 2) out.push(new Float32Array(new Uint32Array([dv.getUint16(i, true) << 16]).buffer)[0]!);
  else if (type === GgmlType.Q8_0) {
    for (let b = 0; b < bytes.length; b += 34) {
      const d = f16(dv.getUint16(b, true));
      for (let j = 0; j < 32; j++) out.push(Math.fround(d * dv.getInt8(b + 2 + j)));
    }
  } else throw new Error(`no decoder for type ${type}`);
  return out;
}

async function valuesOf(m: GgufModel, name: string): Promise<number[]> {
  const t = m.findTensor(name);
  if (t === undefined) throw new Error(`no tensor ${name}`);
  return decode(t.type, await readTensorData(t));
}

/**
 * The fused ffn_up of every block, element by element: the translation equals gate rows then
 * up rows read from the Ollama source, and equals the native twin's fused tensor.
 */
async function expectFusedGateUp(p: HandlerProof, ollamaPath: string): Promise<void> {
  const source = await readGguf(ollamaPath);
  const translated = await readGguf(p.outPath);
  try {
    for (let b = 0; b < BLOCKS; b++) {
      const gate = await valuesOf(source, `blk.${b}.ffn_gate.weight`);
      const up = await valuesOf(source, `blk.${b}.ffn_up.weight`);
      const got = await valuesOf(translated, `blk.${b}.ffn_up.weight`);
      expect(got.length).toBe(gate.length + up.length);
      expect(got).toEqual([...gate, ...up]);
      expect(got).toEqual(await valuesOf(p.native.text, `blk.${b}.ffn_up.weight`));
    }
  } finally {
    await source.close();
    await translated.close();
  }
}

async function prove(seed: number, opts: { variant?: string; sourceDtype?: "f16" | "bf16"; twin?: TwinOptions; profile?: TranslationProfile } = {}) {
  const d = await dir();
  const p = await proveHandler(d, "glmocr", { seed, nativeTwin: true, profile: "reference", ...opts, twin: { ...REFERENCE_GAPS, ...opts.twin } });
  const ollama = await writeFixture(generateFixture("glmocr", { seed, layout: "ollama", ...opts }), d);
  return { p, ollamaPath: ollama.text };
}

function expectCommon(p: HandlerProof): void {
  expect(p.view.report.handlers.map((h) => h.name)).toEqual(["glmocr"]);
  const m = p.translatedModel;
  expect(m.getString("general.architecture")).toBe("glm4");
  expect(m.getArray("glm4.rope.dimension_sections").toArray()).toEqual([2, 3, 3, 0]);
  expect(m.getU32("glm4.rope.dimension_count")).toBe(16);
  expect(m.getString("tokenizer.ggml.pre")).toBe("chatglm-bpe");
  expect(m.tensors.some((t) => /^(v|mm)\.|\.ffn_gate\.|\.attn_out\.|post_attn_norm|post_ffn_norm/.test(t.name))).toBe(false);
  expect(p.diff.kv).toEqual([]);
  expect(p.diff.missingTensors.sort()).toEqual([...NEXTN_TENSORS].sort());
  expect(p.diff.extraTensors).toEqual([]);
  expect(p.diff.layout).toEqual([]);
  expect(p.diff.data).toEqual([]);
  expect(p.sourceDigest.after).toBe(p.sourceDigest.before);
  const nativeLoad = p.twin!.load!;
  expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
  expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
}

describe("glmocr handler (GLM-OCR as Ollama converted it: split gate/up, no NextN layer, vision inline)", () => {
  it("F16: renames to glm4, fuses gate+up by raw concat; real llama.cpp generates what the native twin generates", async () => {
    const { p, ollamaPath } = await prove(5);
    expectCommon(p);
    referenceOut = p.outPath;
    expect(p.view.report.gapsKept.map((f) => f.name)).toEqual(["glmocr-user-turn-end"]);
    expect(p.translatedModel.has("tokenizer.ggml.eot_token_id")).toBe(false);
    expect(p.translatedModel.findTensor("blk.0.ffn_up.weight")).toMatchObject({ type: GgmlType.F16, shape: [32, 128] });
    expect(p.view.report.ops.map((o) => o.tensor)).toEqual(["blk.0.ffn_up.weight", "blk.1.ffn_up.weight"]);
    await expectFusedGateUp(p, ollamaPath);
  });

  it("BF16 source: the fused tensor stays BF16", async () => {
    const { p, ollamaPath } = await prove(6, { sourceDtype: "bf16" });
    expectCommon(p);
    expect(p.translatedModel.findTensor("blk.1.ffn_up.weight")).toMatchObject({ type: GgmlType.BF16, shape: [32, 128] });
    await expectFusedGateUp(p, ollamaPath);
  });

  it("Q8_0 (Ollama's quantizer): whole Q8_0 rows are joined, byte for byte what llama.cpp's q8_0 converter writes", async () => {
    const { p, ollamaPath } = await prove(7, { variant: "q8_0" });
    expectCommon(p);
    const translated = await readGguf(p.outPath);
    try {
      const got = translated.findTensor("blk.0.ffn_up.weight")!;
      const want = p.native.text.findTensor("blk.0.ffn_up.weight")!;
      expect(got).toMatchObject({ type: GgmlType.Q8_0, shape: [32, 128] });
      expect(Buffer.from(await readTensorData(got)).equals(Buffer.from(await readTensorData(want)))).toBe(true);
    } finally {
      await translated.close();
    }
    await expectFusedGateUp(p, ollamaPath);

    await expectServerAnswersLikeTwin(p);
  });

  it("mixed Q8_0 gate + F16 up, native: both halves are widened to F32 before the concat (a raw concat would not fit)", async () => {
    const fused = Array.from({ length: BLOCKS }, (_, b) => `blk.${b}.ffn_up.weight`);
    const { p, ollamaPath } = await prove(8, { variant: "mixed", profile: "native", twin: { ...NATIVE_GAPS, layoutMayDiffer: fused } });
    expectCommon(p);
    expect(p.view.report.fixes.map((f) => f.name)).toEqual(["glmocr-ffn-gate-up-mixed-types-f32", "glmocr-user-turn-end"]);
    const source = await readGguf(ollamaPath);
    try {
      const gate = source.findTensor("blk.0.ffn_gate.weight")!;
      const up = source.findTensor("blk.0.ffn_up.weight")!;
      expect([gate.type, up.type]).toEqual([GgmlType.Q8_0, GgmlType.F16]);
      // the reference's raw concat: 64 Q8_0 rows of 34 bytes + 64 F16 rows of 64 bytes, for a [32, 128] F16 slot
      expect(gate.data.kind === "range" && up.data.kind === "range" ? gate.data.length + up.data.length : 0).toBe(64 * 34 + 64 * 64);
      expect(64 * 34 + 64 * 64).not.toBe(32 * 128 * 2);
    } finally {
      await source.close();
    }
    expect(p.translatedModel.findTensor("blk.0.ffn_up.weight")).toMatchObject({ type: GgmlType.F32, shape: [32, 128] });
    await expectFusedGateUp(p, ollamaPath);
  });
});

describe("glmocr handler: gate and up of two types", () => {
  const fused = Array.from({ length: BLOCKS }, (_, b) => `blk.${b}.ffn_up.weight`);

  it("mixed Q8_0 gate + F16 up, reference: refused with a typed error naming the tensor (its raw join does not fit, and llama.cpp would read wrong bytes)", async () => {
    const ollama = generateFixture("glmocr", { seed: 8, layout: "ollama", variant: "mixed" });
    expect(() => translateModel(ollama.text, { profile: "reference" })).toThrow(expect.objectContaining({ code: "MIXED_TYPES", tensor: "blk.0.ffn_up.weight" }));
    const path = (await writeFixture(ollama, join(await dir(), "mixed-reference"))).text;
    await expect(translate(path, { profile: "reference" })).rejects.toMatchObject({ code: "MIXED_TYPES", handler: "glmocr" });
  });

  it("mixed-bf16 (BF16 gate + F16 up): the reference joins the bytes raw into F16 and llama.cpp computes another model; native widens both to F32 and computes the twin's", async () => {
    const d = join(await dir(), "mixed-bf16");
    const native = await proveHandler(d, "glmocr", { seed: 9, variant: "mixed-bf16", nativeTwin: true, twin: { ...NATIVE_GAPS, layoutMayDiffer: fused } });
    expectCommon(native);
    expect(native.view.report.fixes.map((f) => f.name)).toEqual(["glmocr-ffn-gate-up-mixed-types-f32", "glmocr-user-turn-end"]);
    expect(native.translatedModel.findTensor("blk.0.ffn_up.weight")).toMatchObject({ type: GgmlType.F32, shape: [32, 128] });
    const ollamaPath = (await writeFixture(generateFixture("glmocr", { seed: 9, layout: "ollama", variant: "mixed-bf16" }), d)).text;
    await expectFusedGateUp(native, ollamaPath);

    const reference = await proveHandler(d, "glmocr", { seed: 9, variant: "mixed-bf16", profile: "reference", twin: { ...REFERENCE_GAPS, compareData: true } });
    expect(reference.view.report.gapsKept.map((f) => f.name)).toEqual(["glmocr-ffn-gate-up-mixed-types-f32", "glmocr-user-turn-end"]);
    // the reference's slot: F16, gate's BF16 bits then up's F16 bits, byte for byte
    const source = await readGguf(ollamaPath);
    const translated = await readGguf(reference.outPath);
    try {
      for (let b = 0; b < BLOCKS; b++) {
        const got = translated.findTensor(`blk.${b}.ffn_up.weight`)!;
        expect(got).toMatchObject({ type: GgmlType.F16, shape: [32, 128] });
        const [gate, up] = [source.findTensor(`blk.${b}.ffn_gate.weight`)!, source.findTensor(`blk.${b}.ffn_up.weight`)!];
        expect([gate.type, up.type]).toEqual([GgmlType.BF16, GgmlType.F16]);
        const raw = Buffer.concat([await readTensorData(gate), await readTensorData(up)]);
        expect(Buffer.from(await readTensorData(got)).equals(raw)).toBe(true);
      }
    } finally {
      await source.close();
      await translated.close();
    }
    expect(reference.diff.data.sort()).toEqual([...fused].sort());
    // real llama.cpp: the native output scores next tokens as the twin does (its F32 slot against
    // the twin's F16 only changes the rounding of the activations), the reference output does not
    const twin = native.twin!.paths.text;
    const [ours, theirs] = [await distributionDistance(native.outPath, twin), await distributionDistance(reference.outPath, twin)];
    expect(ours).toBeLessThan(COMPUTES_DIFFERENTLY);
    expect(theirs).toBeGreaterThan(COMPUTES_DIFFERENTLY);
  }, 300_000);
});

describe("glmocr handler, native profile", () => {
  it("glmocr-user-turn-end: eot_token_id = <|user|>; llama-server stops at <|user|> like the native twin, not with the reference output", async () => {
    const d = join(await dir(), "native-profile");
    const p = await proveHandler(d, "glmocr", { seed: 5, nativeTwin: true, twin: NATIVE_GAPS });
    expect(p.view.report.fixes.map((f) => [f.handler, f.name])).toEqual([["glmocr", "glmocr-user-turn-end"]]);
    expectCommon(p);
    const tokens = p.translatedModel.getArray("tokenizer.ggml.tokens").toArray() as string[];
    const user = tokens.indexOf("<|user|>");
    expect(p.translatedModel.getU32("tokenizer.ggml.eot_token_id")).toBe(user);
    expect(p.native.text.getU32("tokenizer.ggml.eot_token_id")).toBe(user);
    // llama-server made to pick <|user|>: an end-of-generation token ends the reply at once, silently
    const twin = await serverStopsAt(p.twin!.paths.text, user);
    expect(twin).toEqual({ stopType: "eos", predicted: 1, content: "" });
    expect(await serverStopsAt(p.outPath, user)).toEqual(twin);
    // the reference output generates straight through the next user turn
    if (referenceOut === undefined) throw new Error("run with the F16 reference test");
    const reference = await serverStopsAt(referenceOut, user);
    expect(reference.stopType).toBe("limit");
    expect(reference.predicted).toBe(3);
  });
});

describe("glmocr handler: the reference's conditions, on small synthetic models", () => {
  function model(edit: (m: GgufModel) => void): GgufModel {
    const m = GgufModel.create();
    m.setString("general.architecture", "glmocr");
    m.setU32("glmocr.attention.key_length", 16);
    edit(m);
    addF32(m, "token_embd.weight", [4, 4]);
    return m;
  }

  it("pads mrope_section only when it has exactly 3 items; keeps an existing rope.dimension_count", () => {
    const three = translateModel(model((m) => m.setArray("glmocr.rope.mrope_section", GgufValueType.INT32, [1, 2, 3])))!.model;
    expect(three.getArray("glm4.rope.dimension_sections").toArray()).toEqual([1, 2, 3, 0]);
    expect(three.getU32("glm4.rope.dimension_count")).toBe(16);
    const four = translateModel(
      model((m) => {
        m.setArray("glmocr.rope.mrope_section", GgufValueType.INT32, [1, 2, 3, 4]);
        m.setU32("glmocr.rope.dimension_count", 8);
      }),
    )!.model;
    expect(four.has("glm4.rope.dimension_sections")).toBe(false);
    expect(four.getU32("glm4.rope.dimension_count")).toBe(8);
  });

  it("sets chatglm-bpe only over an existing pre-tokenizer; without block_count it fuses blocks 0..15", () => {
    const noPre = translateModel(model(() => {}))!.model;
    expect(noPre.has("tokenizer.ggml.pre")).toBe(false);
    const m = model((x) => {
      x.setString("tokenizer.ggml.pre", "llama-bpe");
      addF32(x, "blk.15.ffn_gate.weight", [4, 2], 1);
      addF32(x, "blk.15.ffn_up.weight", [4, 2], 100);
      addF32(x, "blk.16.ffn_gate.weight", [4, 2], 1);
      addF32(x, "blk.16.ffn_up.weight", [4, 2], 100);
    });
    const view = translateModel(m)!;
    expect(view.model.getString("tokenizer.ggml.pre")).toBe("chatglm-bpe");
    expect(view.model.findTensor("blk.15.ffn_up.weight")!.shape).toEqual([4, 4]);
    expect(view.model.hasTensor("blk.15.ffn_gate.weight")).toBe(false);
    // block 16 is past the reference's default count: left as it is
    expect(view.model.findTensor("blk.16.ffn_up.weight")!.shape).toEqual([4, 2]);
    expect(view.model.hasTensor("blk.16.ffn_gate.weight")).toBe(true);
  });
});
