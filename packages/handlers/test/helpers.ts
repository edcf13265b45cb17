import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgmlType, GgufModel, readGguf, serializeGguf } from "@compat/gguf";
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

/** Writes a model to disk and reads it back, so tensors are byte ranges of a real file. */
export async function onDisk(dir: string, name: string, m: GgufModel): Promise<{ path: string; model: GgufModel; bytes: Uint8Array }> {
  const path = join(dir, name);
  const bytes = await serializeGguf(m);
  await writeFile(path, bytes);
  return { path, model: await readGguf(path), bytes: new Uint8Array(await readFile(path)) };
}
