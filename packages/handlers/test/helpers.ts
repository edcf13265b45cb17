import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgmlType, GgufModel, GgufValueType, readGguf, serializeGguf } from "@compat/gguf";
import { afterAll } from "vitest";

/** A temp dir per test file, removed afterwards. */
export function tempDir(): () => Promise<string> {
  let dir: string | undefined;
  afterAll(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });
  return async () => (dir ??= await mkdtemp(join(tmpdir(), "compat-handlers-")));
}

/** F32 tensor bytes with a recognizable pattern (value = seed + index). */
export function f32Bytes(n: number, seed = 0): Uint8Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = seed + i;
  return new Uint8Array(a.buffer);
}

export function addF32(m: GgufModel, name: string, shape: number[], seed = 0): void {
  const n = shape.reduce((a, b) => a * b, 1);
  m.addTensor({ name, type: GgmlType.F32, shape, data: { kind: "bytes", bytes: f32Bytes(n, seed) } });
}

/**
 * The opening of a tiny gemma3 file with Ollama's 4B-style quirks (no rms eps, vision
 * inline): its keys and an [8, 4] token embedding. Callers add the tensors they need.
 */
export function ollamaGemma3Start(): GgufModel {
  const m = GgufModel.create();
  m.setString("general.architecture", "gemma3");
  m.setU32("gemma3.context_length", 131072);
  m.setU32("gemma3.mm.tokens_per_image", 256);
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, ["<pad>", "<eos>", "a", "b", "<image_soft_token>"]);
  m.setArray("tokenizer.ggml.scores", GgufValueType.FLOAT32, [0, 0, -1, -2, 0]);
  m.setArray("tokenizer.ggml.token_type", GgufValueType.INT32, [3, 3, 1, 1, 4]);
  addF32(m, "token_embd.weight", [8, 4], 1);
  return m;
}

/** Writes a model to disk: its path and bytes. */
export async function writeOnDisk(dir: string, name: string, m: GgufModel): Promise<{ path: string; bytes: Uint8Array }> {
  const path = join(dir, name);
  const bytes = await serializeGguf(m);
  await writeFile(path, bytes);
  return { path, bytes: new Uint8Array(await readFile(path)) };
}

/** Writes a model to disk and reads it back, so tensors are byte ranges of a real file. The caller closes `model`. */
export async function onDisk(dir: string, name: string, m: GgufModel): Promise<{ path: string; model: GgufModel; bytes: Uint8Array }> {
  const written = await writeOnDisk(dir, name, m);
  return { ...written, model: await readGguf(written.path) };
}
