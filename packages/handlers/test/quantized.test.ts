/**
 * The files Ollama ships: each arch's Ollama fixture as `ollama create --quantize q4_K_M`
 * writes it (testkit quantize-q4km.ts: mostly Q4_K, some Q6_K, Q5_0/Q8_0 where a row is not
 * whole 256-value blocks, norms F32), translated, against its native twin quantized by
 * llama-quantize with the same type per tensor.
 *
 * The arch tests prove each translation against its float twin, with the reasons for every
 * difference. Here the quantized translation must differ from its quantized twin in exactly
 * the keys and tensors the float translation differs from its float twin (so quantizing adds
 * no difference, and the tensors the translation writes are the twin's bytes), and load and
 * answer in real llama.cpp: llama-server, the same greedy tokens as the twin wherever the
 * float translation has no key or value difference from its twin (an embedding, for the
 * embedding models).
 */
import { join } from "node:path";
import { GgmlType, parseGguf, readGguf, readTensorData, serializeGguf, type GgufModel } from "@compat/gguf";
import { translateModel } from "@compat/handlers";
import { fixtureBaseName, generateFixture, killAllSpawned, runLoaderInSubprocess, serverCompletion, startLlamaServer, type FixtureQuant } from "@compat/testkit";
import { afterAll, describe, expect, it } from "vitest";
import { tempDir } from "./helpers";
import { proveHandler } from "./proof";
import { compareWithNative, type TwinDifferences } from "./twin";

const dir = tempDir();
afterAll(() => killAllSpawned());

interface QuantCase {
  arch: string;
  variant: string;
  quant: FixtureQuant;
  embedding?: boolean;
}

/** Every arch (gptoss ships MXFP4 experts, which Ollama never re-quantized), default variant, both quantizer revisions where a tower differs. */
const QUANT_CASES: QuantCase[] = [
  { arch: "llama", variant: "llama3", quant: "q4_k_m" },
  { arch: "gemma3", variant: "1b", quant: "q4_k_m" },
  { arch: "gemma3", variant: "4b-vision", quant: "q4_k_m-2025" },
  { arch: "qwen3next", variant: "80b-a3b", quant: "q4_k_m" },
  { arch: "olmo3", variant: "7b-instruct", quant: "q4_k_m" },
  { arch: "embeddinggemma", variant: "300m", quant: "q4_k_m", embedding: true },
  { arch: "lfm2", variant: "1.2b", quant: "q4_k_m" },
  { arch: "glm4moelite", variant: "flash", quant: "q4_k_m" },
  { arch: "laguna", variant: "xs2", quant: "q4_k_m" },
  { arch: "mistral3", variant: "small-3.1", quant: "q4_k_m-2025" },
  { arch: "mistral3", variant: "ministral3", quant: "q4_k_m" },
  { arch: "bert", variant: "snowflake-arctic-embed2", quant: "q4_k_m", embedding: true },
  { arch: "nemotron_h_moe", variant: "super", quant: "q4_k_m" },
  { arch: "llama4", variant: "maverick", quant: "q4_k_m-2025" },
  { arch: "gemma3n", variant: "e2b", quant: "q4_k_m-2025" },
  { arch: "gemma4", variant: "moe", quant: "q4_k_m" },
  { arch: "gemma4", variant: "dense", quant: "q4_k_m" },
  { arch: "qwen35", variant: "9b", quant: "q4_k_m" },
  { arch: "qwen35moe", variant: "35b-a3b", quant: "q4_k_m" },
  { arch: "qwen25vl", variant: "default", quant: "q4_k_m-2025" },
  { arch: "glmocr", variant: "default", quant: "q4_k_m" },
  { arch: "qwen3vl", variant: "default", quant: "q4_k_m-2025" },
  { arch: "qwen3vlmoe", variant: "30b-a3b", quant: "q4_k_m-2025" },
  { arch: "deepseekocr", variant: "3b", quant: "q4_k_m-2025" },
  { arch: "nemotron_h_omni", variant: "omni", quant: "q4_k_m" },
];

const SEED = 31;

/** A difference list by names only (shapes and dtypes in the messages move with the widths). */
function names(d: TwinDifferences): Record<keyof TwinDifferences, string[]> {
  const key = (s: string) => s.split(":")[0]!;
  return {
    kv: d.kv.map(key).sort(),
    missingTensors: [...d.missingTensors].sort(),
    extraTensors: [...d.extraTensors].sort(),
    layout: d.layout.map(key).sort(),
    data: [...d.data].sort(),
  };
}

/** The float translation's differences from its float twin (in memory; the arch tests explain each). */
async function floatDifferences(c: QuantCase): Promise<TwinDifferences> {
  const ollama = generateFixture(c.arch, { seed: SEED, layout: "ollama", variant: c.variant });
  const native = generateFixture(c.arch, { seed: SEED, layout: "native", variant: c.variant });
  const view = translateModel(ollama.text);
  if (view === null) throw new Error(`no handler translated ${c.arch}/${c.variant}`);
  // as written (a key injected as a JS number is only an f32 once serialized)
  return compareWithNative(parseGguf(await serializeGguf(view.model)), native.text);
}

function typeCounts(m: GgufModel): Record<string, number> {
  const out: Record<string, number> = {};
  for (const t of m.tensors) out[GgmlType[t.type] ?? String(t.type)] = (out[GgmlType[t.type] ?? String(t.type)] ?? 0) + 1;
  return out;
}

async function serverTokens(model: string): Promise<number[]> {
  const server = await startLlamaServer({ model });
  try {
    return (await serverCompletion(server, { prompt: "Hello", nPredict: 4 })).tokens;
  } finally {
    await server.stop();
  }
}

describe("Ollama's Q4_K_M files: the translation equals the llama-quantize twin and runs in llama.cpp", () => {
  it.each(QUANT_CASES)("$arch/$variant $quant", async (c) => {
    const float = names(await floatDifferences(c));
    const d = join(await dir(), `${c.arch}-${c.variant}-${c.quant}`);
    const p = await proveHandler(d, c.arch, {
      seed: SEED,
      variant: c.variant,
      quant: c.quant,
      nativeTwin: { load: false },
      ...(c.embedding ? { embedding: true } : {}),
    });
    expect(names(p.diff)).toEqual(float);
    const source = await readGguf(join(d, `${fixtureBaseName({ ...p.native.meta, layout: "ollama" })}.gguf`));
    const translated = await readGguf(p.outPath);
    try {
      const counts = typeCounts(source);
      expect(source.getNumber("general.file_type")).toBe(15);
      // quantized: every file has block types, and every quantized tensor of the source reaches the output as its bytes
      expect(Object.keys(counts).some((t) => !["F32", "F16", "BF16"].includes(t)), JSON.stringify(counts)).toBe(true);
      // (except what llama.cpp's converter reorders on purpose: nemotron's rope-less Q/K rows)
      const reordered = new Set(p.native.meta.reorderedTensors ?? []);
      for (const t of translated.tensors) {
        if (reordered.has(t.name)) continue;
        const from = source.findTensor(t.name);
        if (from === undefined || from.type !== t.type || ["F32", "F16", "BF16"].includes(GgmlType[t.type] ?? "")) continue;
        const native = p.native.text.findTensor(t.name);
        if (native === undefined || native.type !== t.type) continue;
        // a prefix where Ollama's file holds fewer rows than the twin (gemma3's and gemma3n's embeddings)
        const [ours, theirs] = [Buffer.from(await readTensorData(t)), Buffer.from(await readTensorData(native))];
        expect(ours.length <= theirs.length && ours.equals(theirs.subarray(0, ours.length)), `${t.name} is the twin's bytes`).toBe(true);
      }
    } finally {
      await source.close();
      await translated.close();
    }
    const same = float.kv.length === 0 && float.data.length === 0 && float.layout.length === 0 && float.missingTensors.length === 0;
    if (c.embedding) {
      expect(p.load.ok ? p.load.embedding?.length : p.load.error).toBeGreaterThan(0);
      const twin = await runLoaderInSubprocess(p.twin!.paths.text, { embedding: true });
      expect(twin.ok ? twin.embedding?.length : twin.error).toBeGreaterThan(0);
      if (same && p.load.ok && twin.ok) expect(p.load.embedding).toEqual(twin.embedding);
      return;
    }
    expect(p.load.ok ? p.load.tokens.length : p.load.error).toBe(4);
    const ours = await serverTokens(p.outPath);
    const twin = await serverTokens(p.twin!.paths.text);
    expect(ours).toHaveLength(4);
    expect(twin).toHaveLength(4);
    if (same) expect(ours).toEqual(twin);
  }, 600_000);
});
