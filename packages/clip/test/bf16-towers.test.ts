/**
 * BF16 vision towers, as Ollama's converter wrote them from BF16 checkpoints in Aug-Sep 2025
 * (convert/reader_safetensors.go kept v.* BF16 from fa7776fd2 until 2717dce6f). Stock clip.cpp
 * cannot run some of them on llama.cpp's CPU backend: convolution kernels, position
 * embeddings added to or interpolated with F32 activations. llama-mtmd-cli aborts on the
 * reference's mmproj (it promotes F16 only); the native profile widens exactly those tensors
 * to F32 (`<handler>-bf16-to-f32`), as llama.cpp's converter writes them for a BF16 output.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GgmlType, GgufModel, readGguf, readTensorData, writeGguf } from "@compat/gguf";
import { clipView } from "@compat/clip";
import { fromF32, toF32 } from "@compat/tensor-ops";
import { generateFixture, killAllSpawned, runMtmdCli, writeFixture } from "@compat/testkit";
import { tempDir } from "../../handlers/test/helpers";
import { EMBEDDINGS_DIFFER, embeddingDistance, greyImage, mediaEmbeddings, mtmdAnswer, noiseImage, proveClip, valuesF32 } from "./proof";

const dir = tempDir();
afterAll(() => killAllSpawned());

interface Bf16Case {
  arch: string;
  variant: string;
  handler: string;
  /** Image side and llama.cpp chat template, as the arch's own clip test uses them. */
  side: number;
  template: string;
  args?: string[];
  /** The tensors the fix widens; none when clip.cpp runs the whole BF16 tower on the CPU. */
  widened: string[];
  /** How llama-mtmd-cli dies on the reference's mmproj (signal, and what it printed). */
  referenceFails?: { signal: string; stderr?: RegExp };
}

/** The scheduler finds no backend for the BF16 conv's mul_mat (ggml-backend.cpp). */
const SCHEDULER = { signal: "SIGABRT", stderr: /GGML_ASSERT\(\*cur_backend_id != -1\)/ };
/** The unsplit Conv3D kernel the reference leaves: clip.cpp's qwen3vl graph crashes on it. */
const UNSPLIT = { signal: "SIGSEGV" };
const CASES: Bf16Case[] = [
  { arch: "gemma3", variant: "4b-vision", handler: "gemma3-clip", side: 64, template: "gemma", widened: ["v.patch_embd.weight", "v.position_embd.weight"], referenceFails: SCHEDULER },
  { arch: "mistral3", variant: "small-3.1", handler: "mistral3-clip", side: 16, template: "mistral-v7", widened: ["v.patch_embd.weight"], referenceFails: SCHEDULER },
  { arch: "qwen25vl", variant: "default", handler: "qwen25vl-clip", side: 56, template: "chatml", widened: ["v.patch_embd.weight", "v.patch_embd.weight.1"], referenceFails: SCHEDULER },
  {
    arch: "qwen3vl",
    variant: "default",
    handler: "qwen3vl-clip",
    side: 96,
    template: "chatml",
    widened: ["v.patch_embd.weight", "v.patch_embd.weight.1", "v.position_embd.weight"],
    referenceFails: UNSPLIT,
  },
  {
    arch: "qwen35",
    variant: "9b",
    handler: "qwen35-clip",
    side: 96,
    template: "chatml",
    widened: ["v.patch_embd.weight", "v.patch_embd.weight.1", "v.position_embd.weight"],
    referenceFails: UNSPLIT,
  },
  {
    arch: "glmocr",
    variant: "default",
    handler: "glmocr-clip",
    side: 112,
    template: "chatglm4",
    widened: ["v.patch_embd.weight", "v.patch_embd.weight.1", "mm.patch_merger.weight"],
    referenceFails: SCHEDULER,
  },
  {
    arch: "deepseekocr",
    variant: "3b",
    handler: "deepseekocr-clip",
    side: 64,
    template: "deepseek-ocr",
    widened: ["v.sam.patch_embd.weight", "v.sam.neck.0.weight", "v.sam.neck.2.weight", "v.sam.net_2.weight", "v.sam.net_3.weight"],
    referenceFails: SCHEDULER,
  },
  { arch: "llama4", variant: "maverick", handler: "llama4-clip", side: 32, template: "llama4", widened: [] },
  { arch: "gemma4", variant: "dense", handler: "gemma4-clip", side: 64, template: "gemma", args: ["--image-min-tokens", "4", "--image-max-tokens", "16"], widened: [] },
];

const BF16 = { sourceDtype: "bf16", bf16Towers: true } as const;

describe("BF16 vision towers on llama.cpp's CPU backend", () => {
  it.each(CASES)("$arch/$variant: native widens exactly what clip.cpp cannot run in BF16 on the CPU (none for llama4, gemma4); the reference mmproj aborts llama-mtmd-cli where it does", async (c) => {
    const d = join(await dir(), c.arch);
    const p = await proveClip(d, c.arch, { seed: 21, variant: c.variant, ...BF16 });
    const fixName = `${c.handler}-bf16-to-f32`;
    const fix = p.view.report.fixes.find((f) => f.name === fixName);
    const source = await readGguf(p.ollamaPath);
    try {
      const towerBf16 = source.tensors.filter((t) => /^(v|mm|s)\./.test(t.name) && t.type === GgmlType.BF16).length;
      expect(towerBf16, "the Ollama fixture's tower is BF16").toBeGreaterThan(0);
    } finally {
      await source.close();
    }
    if (c.widened.length === 0) {
      expect(fix).toBeUndefined();
    } else {
      expect(fix?.reason).toMatch(/CPU backend/);
      for (const name of c.widened) expect(fix?.reason).toContain(name);
      // exactly these are F32 now, each the twin's F32 values rounded through BF16 (all the file holds)
      for (const name of c.widened) {
        expect(p.mmproj.findTensor(name)?.type, name).toBe(GgmlType.F32);
        expect(p.native.mmproj!.findTensor(name)?.type, `${name} in the twin`).toBe(GgmlType.F32);
        const twin = await valuesF32(p.native.mmproj!, name);
        expect(await valuesF32(p.mmproj, name)).toEqual(toF32(GgmlType.BF16, fromF32(GgmlType.BF16, twin), twin.length));
      }
      const widenOps = p.view.report.ops.filter((o) => o.label === "BF16->F32 widen").map((o) => o.tensor);
      expect(widenOps.sort()).toEqual([...c.widened].sort());
    }
    expect(p.sourceDigest.after).toBe(p.sourceDigest.before);

    const twin = await writeFixture(p.native, d);
    const image = await greyImage(d, c.side, 128);
    const args = c.args ?? [];
    // ours answers, with our text GGUF and with the twin's
    expect((await mtmdAnswer(p.textPath, p.mmprojPath, image, c.template, args)).length).toBeGreaterThan(0);
    await mtmdAnswer(twin.text, twin.mmproj!, image, c.template, args);
    const noise = await noiseImage(d, c.side, 3);
    // what the projector computes: the twin's embeddings, up to Ollama's BF16 storage of what the twin holds F32
    const distance = embeddingDistance(await mediaEmbeddings(twin.text, p.mmprojPath, noise, c.template, args), await mediaEmbeddings(twin.text, twin.mmproj!, noise, c.template, args));
    expect(distance).toBeLessThan(EMBEDDINGS_DIFFER);

    // the reference's mmproj of the same file
    const reference = await clipView(p.ollamaPath, { profile: "reference" });
    const referencePath = join(d, `mmproj-${c.arch}-reference.gguf`);
    await reference!.writeTo(referencePath);
    await reference!.close();
    const run = await runMtmdCli({ model: twin.text, mmproj: referencePath, image, prompt: "Describe.", args: ["--chat-template", c.template, ...args] });
    if (c.referenceFails === undefined) {
      expect(run.ok, run.stderr.slice(-2000)).toBe(true);
    } else {
      expect(run.ok).toBe(false);
      expect(run.signal).toBe(c.referenceFails.signal);
      if (c.referenceFails.stderr) expect(run.stderr).toMatch(c.referenceFails.stderr);
    }
  }, 600_000);

  it("mistral3: the reference leaves BF16 vision Q/K unpermuted; our Q/K are the converter's, and with only their order undone clip.cpp computes other embeddings", async () => {
    const d = join(await dir(), "mistral3-permute");
    const p = await proveClip(d, "mistral3", { seed: 22, variant: "small-3.1", ...BF16 });
    expect(p.view.report.fixes.map((f) => f.name)).toContain("mistral3-clip-permute-qk-any-type");
    const reference = await clipView(p.ollamaPath, { profile: "reference" });
    expect(reference!.report.gapsKept.map((f) => f.name)).toEqual(expect.arrayContaining(["mistral3-clip-permute-qk-any-type", "mistral3-clip-bf16-to-f32"]));
    // our mmproj with the reference's (unpermuted) attn_q/attn_k put back, nothing else changed
    const unpermuted = GgufModel.create();
    for (const kv of p.mmproj.kvs()) unpermuted.set(kv.key, kv.type, kv.value as never);
    for (const t of p.mmproj.tensors) {
      const fromReference = /^v\.blk\.\d+\.attn_[qk]\.weight$/.test(t.name) ? reference!.model.findTensor(t.name)! : t;
      expect(fromReference.type).toBe(t.type);
      unpermuted.addTensor({ name: t.name, type: t.type, shape: t.shape.slice(), data: { kind: "bytes", bytes: await readTensorData(fromReference) } });
    }
    await reference!.close();
    const unpermutedPath = join(d, "mmproj-mistral3-unpermuted-qk.gguf");
    await writeGguf(unpermuted, unpermutedPath);
    const twin = await writeFixture(p.native, d);
    const image = await noiseImage(d, 64, 5);
    // our Q/K are the converter's, value for value
    for (const b of [0, 1]) {
      for (const qk of ["q", "k"]) {
        const name = `v.blk.${b}.attn_${qk}.weight`;
        expect(await valuesF32(p.mmproj, name), name).toEqual(await valuesF32(p.native.mmproj!, name));
      }
    }
    const want = await mediaEmbeddings(twin.text, twin.mmproj!, image, "mistral-v7");
    const oursEmbd = await mediaEmbeddings(twin.text, p.mmprojPath, image, "mistral-v7");
    const unpermutedEmbd = await mediaEmbeddings(twin.text, unpermutedPath, image, "mistral-v7");
    const ours = embeddingDistance(oursEmbd, want);
    expect(ours).toBeLessThan(EMBEDDINGS_DIFFER);
    // only the Q/K order differs from ours, and it moves the embeddings several times further than the storage does
    expect(embeddingDistance(unpermutedEmbd, oursEmbd)).toBeGreaterThan(Math.max(EMBEDDINGS_DIFFER, 3 * ours));
    expect(embeddingDistance(unpermutedEmbd, want)).toBeGreaterThan(EMBEDDINGS_DIFFER);
  }, 600_000);
});
