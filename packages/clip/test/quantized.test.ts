/**
 * The towers of the files Ollama ships (see packages/handlers/test/quantized.test.ts for the
 * text side): F16 under the 2026 quantizer, the 2025 one's quantized attn_v (names with "v."
 * were skipped unless they held "_v."; DeepSeek-OCR's SAM tensors, named "s.", were not
 * skipped at all), and BF16 towers (Ollama's Aug-Sep 2025 converter) with that quantizer.
 * Our mmproj must differ from the twin's (llama.cpp's converter, the same types per tensor)
 * in exactly the keys and tensors the float case does, plus the tensors the translation
 * widens out of a quantized source (their values then are that source's, dequantized), and
 * llama-mtmd-cli must answer with it and compute the twin's embeddings.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, parseGguf, readGguf, readTensorData, serializeGguf, writeGguf } from "@compat/gguf";
import { clipViewModel } from "@compat/clip";
import { toF32 } from "@compat/tensor-ops";
import { encodeAs, generateFixture, killAllSpawned, writeFixture, type FixtureOptions, type FixtureQuant, type FloatEncoding } from "@compat/testkit";
import { tempDir } from "../../handlers/test/helpers";
import { compareWithNative, type TwinDifferences } from "../../handlers/test/twin";
import { EMBEDDINGS_DIFFER, embeddingDistance, mediaEmbeddings, mtmdAnswer, noiseImage, proveClip, valuesF32 } from "./proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

interface ClipQuantCase {
  arch: string;
  variant: string;
  quant: FixtureQuant;
  bf16Towers?: boolean;
  side: number;
  template: string;
  args?: string[];
  /**
   * Tensors the translation writes F32 out of a quantized source where the twin holds the
   * converter's higher precision: beyond the float case's differences, their values are the
   * source's dequantized ones (nothing better is in the file).
   */
  fromQuantized?: Array<{ tensor: string; source: string }>;
}

const SEED = 33;
const GEMMA4_BUDGET = ["--image-min-tokens", "4", "--image-max-tokens", "16"];
const CASES: ClipQuantCase[] = [
  { arch: "gemma3", variant: "4b-vision", quant: "q4_k_m-2025", side: 64, template: "gemma" },
  { arch: "gemma3", variant: "4b-vision", quant: "q4_k_m-2025", bf16Towers: true, side: 64, template: "gemma" },
  { arch: "mistral3", variant: "small-3.1", quant: "q4_k_m-2025", side: 64, template: "mistral-v7", fromQuantized: [{ tensor: "v.token_embd.img_break", source: "token_embd.weight" }] },
  { arch: "mistral3", variant: "small-3.1", quant: "q4_k_m-2025", bf16Towers: true, side: 64, template: "mistral-v7", fromQuantized: [{ tensor: "v.token_embd.img_break", source: "token_embd.weight" }] },
  { arch: "llama4", variant: "maverick", quant: "q4_k_m-2025", side: 32, template: "llama4" },
  { arch: "qwen25vl", variant: "default", quant: "q4_k_m-2025", side: 56, template: "chatml" },
  { arch: "qwen25vl", variant: "default", quant: "q4_k_m-2025", bf16Towers: true, side: 56, template: "chatml" },
  {
    arch: "qwen3vl",
    variant: "default",
    quant: "q4_k_m-2025",
    side: 96,
    template: "chatml",
    fromQuantized: [0, 1, 2].map((b) => ({ tensor: `v.blk.${b}.attn_qkv.weight`, source: `v.blk.${b}.attn_v.weight` })),
  },
  {
    arch: "qwen3vlmoe",
    variant: "30b-a3b",
    quant: "q4_k_m-2025",
    side: 96,
    template: "chatml",
    fromQuantized: [0, 1, 2].map((b) => ({ tensor: `v.blk.${b}.attn_qkv.weight`, source: `v.blk.${b}.attn_v.weight` })),
  },
  { arch: "deepseekocr", variant: "3b", quant: "q4_k_m-2025", side: 64, template: "deepseek-ocr" },
  { arch: "qwen35moe", variant: "35b-a3b", quant: "q4_k_m", side: 96, template: "chatml" },
  { arch: "qwen35", variant: "9b", quant: "q4_k_m", side: 96, template: "chatml" },
  { arch: "glmocr", variant: "default", quant: "q4_k_m", side: 112, template: "chatglm4" },
  { arch: "gemma4", variant: "dense", quant: "q4_k_m", side: 64, template: "gemma", args: GEMMA4_BUDGET },
  { arch: "nemotron_h_omni", variant: "vl", quant: "q4_k_m", side: 64, template: "chatml" },
];

/** `path`'s copy of the GGUF at `base` with the named tensors taken from `from` (type, shape, bytes). */
async function withTensorsOf(base: string, from: GgufModel, take: readonly string[], path: string): Promise<string> {
  const m = await readGguf(base);
  try {
    const out = GgufModel.create();
    for (const kv of m.kvs()) out.set(kv.key, kv.type, kv.value as never);
    for (const t of m.tensors) {
      const src = take.includes(t.name) ? from.findTensor(t.name)! : t;
      out.addTensor({ name: t.name, type: src.type, shape: src.shape.slice(), data: { kind: "bytes", bytes: await readTensorData(src) } });
    }
    await writeGguf(out, path);
  } finally {
    await m.close();
  }
  return path;
}

function names(d: TwinDifferences): Record<keyof TwinDifferences, string[]> {
  const key = (s: string) => s.split(":")[0]!;
  return { kv: d.kv.map(key).sort(), missingTensors: [...d.missingTensors].sort(), extraTensors: [...d.extraTensors].sort(), layout: d.layout.map(key).sort(), data: [...d.data].sort() };
}

function fixtureOptions(c: ClipQuantCase): Omit<FixtureOptions, "layout"> {
  return { seed: SEED, variant: c.variant, ...(c.bf16Towers ? { sourceDtype: "bf16", bf16Towers: true } : {}) };
}

/** The float (unquantized) clip view's differences from its twin, as written. */
async function floatDifferences(c: ClipQuantCase): Promise<TwinDifferences> {
  const opts = fixtureOptions(c);
  const view = clipViewModel(generateFixture(c.arch, { ...opts, layout: "ollama" }).text);
  if (view === null) throw new Error(`no clip view of ${c.arch}/${c.variant}`);
  return compareWithNative(parseGguf(await serializeGguf(view.model)), generateFixture(c.arch, { ...opts, layout: "native" }).mmproj!);
}

describe("towers of Ollama's Q4_K_M files: our mmproj equals the twin's and llama-mtmd-cli computes its embeddings", () => {
  it.each(CASES.map((c) => ({ ...c, towers: c.bf16Towers ? "BF16 towers" : "F16 towers" })))("$arch/$variant $quant, $towers", async (c) => {
    const d = join(await dir(), `${c.arch}-${c.variant}-${c.quant}${c.bf16Towers ? "-bf16" : ""}`);
    const float = names(await floatDifferences(c));
    const p = await proveClip(d, c.arch, { ...fixtureOptions(c), quant: c.quant });
    const widened = (c.fromQuantized ?? []).map((x) => x.tensor);
    const without = (d: ReturnType<typeof names>) => ({ ...d, data: d.data.filter((n) => !widened.includes(n)), layout: d.layout.filter((n) => !widened.includes(n)) });
    expect(without(names(p.diff))).toEqual(without(float));
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    // the quantized tower tensors (the 2025 quantizer's attn_v, SAM's matrices) reach our mmproj as the twin's bytes
    const source = await readGguf(p.ollamaPath);
    try {
      const quantized = p.mmproj.tensors.filter((t) => ![GgmlType.F32, GgmlType.F16, GgmlType.BF16].includes(t.type));
      // (the Qwen3-VL towers' only quantized tensor, attn_v, is joined into an F32 attn_qkv)
      if (c.quant === "q4_k_m-2025" && c.arch !== "qwen3vl" && c.arch !== "qwen3vlmoe") expect(quantized.length, "a quantized tower tensor").toBeGreaterThan(0);
      for (const t of quantized) {
        const twin = p.native.mmproj!.findTensor(t.name);
        expect(twin?.type, t.name).toBe(t.type);
        expect(await valuesF32(p.mmproj, t.name), t.name).toEqual(await valuesF32(p.native.mmproj!, t.name));
      }
      // widened out of a quantized source: the twin's values where the source is float, the source's where it was quantized
      for (const { tensor, source: from } of c.fromQuantized ?? []) {
        const src = source.findTensor(from)!;
        expect([GgmlType.F32, GgmlType.F16, GgmlType.BF16].includes(src.type), `${from} is quantized`).toBe(false);
        const ours = await valuesF32(p.mmproj, tensor);
        const twin = await valuesF32(p.native.mmproj!, tensor);
        expect(p.mmproj.findTensor(tensor)?.type).toBe(GgmlType.F32);
        if (tensor.endsWith(".attn_qkv.weight")) {
          // q and k rows are the twin's; the v rows are the quantized attn_v's values
          const v = await valuesF32(source, from);
          expect(ours.subarray(0, ours.length - v.length)).toEqual(twin.subarray(0, ours.length - v.length));
          expect(ours.subarray(ours.length - v.length)).toEqual(v);
        } else {
          // a row of the quantized matrix: the twin's row as Ollama's converter stored it, through the same block quantizer
          const stored = c.bf16Towers ? GgmlType.BF16 : GgmlType.F16;
          const converted = toF32(stored, encodeAs(stored, twin), twin.length);
          expect(ours).toEqual(toF32(src.type, encodeAs(src.type as FloatEncoding, converted), twin.length));
        }
      }
    } finally {
      await source.close();
    }

    const twin = await writeFixture(p.native, d);
    const image = await noiseImage(d, c.side, 4);
    const args = c.args ?? [];
    expect((await mtmdAnswer(p.textPath, p.mmprojPath, image, c.template, args)).length).toBeGreaterThan(0);
    // against the twin holding the widened tensors' values as the Ollama file has them (checked above): the rest computes alike
    const twinMmproj = widened.length === 0 ? twin.mmproj! : await withTensorsOf(twin.mmproj!, p.mmproj, widened, join(d, "mmproj-twin-as-stored.gguf"));
    const distance = embeddingDistance(await mediaEmbeddings(twin.text, p.mmprojPath, image, c.template, args), await mediaEmbeddings(twin.text, twinMmproj, image, c.template, args));
    expect(distance).toBeLessThan(EMBEDDINGS_DIFFER);
    await p.mmproj.close();
  }, 600_000);
});
