import { createHash } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { readGguf, readTensorData, type GgufModel } from "@compat/gguf";
import { translate, type TranslatedView } from "@compat/handlers";
import { clipView } from "@compat/clip";
import { toF32 } from "@compat/tensor-ops";
import {
  fixtureBaseName,
  generateFixture,
  Prng,
  runMtmdCli,
  writeFixture,
  type FixtureOptions,
  type FixturePaths,
  type GeneratedFixture,
} from "@compat/testkit";
import { expect } from "vitest";
import { expectReadMatchesFile } from "../../handlers/test/proof";
import { compareWithNative, type TwinDifferences, type TwinOptions } from "../../handlers/test/twin";

export interface ClipProof {
  /** Our clip view of the Ollama fixture, and the file it was written to. */
  view: TranslatedView;
  /** The Ollama fixture on disk (never modified). */
  ollamaPath: string;
  mmprojPath: string;
  /** Our text translation of the same fixture, written next to it. */
  textPath: string;
  mmproj: GgufModel;
  native: GeneratedFixture;
  /** Our mmproj against the native twin's (keys clip.cpp reads, tensor names/types/shapes, values as F32). */
  diff: TwinDifferences;
  sourceDigest: { before: string; after: string };
}

const sha256 = async (path: string) => createHash("sha256").update(await readFile(path)).digest("hex");

/**
 * The proof every clip handler gets: the Ollama fixture's clip view, written as
 * `mmproj-<base>.gguf` beside the text translation, compared with the mmproj llama.cpp's
 * converter writes for the same weights. Also checks what must hold of any clip view:
 * the source is unchanged, read() serves the bytes written, and neither side (text or
 * clip) translates our mmproj again. `mmproj` stays open for the caller to read.
 */
export async function proveClip(dir: string, arch: string, opts: Omit<FixtureOptions, "layout"> & { twin?: TwinOptions }): Promise<ClipProof> {
  const { twin, ...fixtureOpts } = opts;
  const fixture = generateFixture(arch, { ...fixtureOpts, layout: "ollama" });
  const ollama = await writeFixture(fixture, dir);
  const before = await sha256(ollama.text);
  const base = fixtureBaseName(fixture.meta);

  const view = await clipView(ollama.text);
  if (view === null) throw new Error(`no clip handler claimed the ${arch} ollama fixture`);
  const mmprojPath = join(dir, `mmproj-${base}-translated.gguf`);
  await view.writeTo(mmprojPath);
  await expectReadMatchesFile(view, mmprojPath);

  const text = await translate(ollama.text);
  if (text === null) throw new Error(`no text handler claimed the ${arch} ollama fixture`);
  const textPath = join(dir, `${base}-translated.gguf`);
  await text.writeTo(textPath);
  await text.close();

  expect(await clipView(mmprojPath), "the clip view of our mmproj must be a no-op").toBeNull();
  expect(await translate(mmprojPath), "the text side must leave our mmproj alone").toBeNull();

  const native = generateFixture(arch, { ...fixtureOpts, layout: "native" });
  if (native.mmproj === undefined) throw new Error(`${arch} native fixture has no mmproj twin`);
  const mmproj = await readGguf(mmprojPath);
  const diff = await compareWithNative(mmproj, native.mmproj, twin);
  await view.close();
  return { view, ollamaPath: ollama.text, mmprojPath, textPath, mmproj, native, diff, sourceDigest: { before, after: await sha256(ollama.text) } };
}

/** A `side` x `side` binary PPM of one grey `level` (llama.cpp's image loader reads PNM). */
export async function greyImage(dir: string, side: number, level: number): Promise<string> {
  const path = join(dir, `grey-${side}-${level}.ppm`);
  await writeFile(path, Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), Buffer.alloc(side * side * 3, level)]));
  return path;
}

/**
 * A `side` x `side` binary PPM of random pixels (seeded): unlike one grey level, its patches
 * differ, so attention between positions (and so RoPE) changes the answer.
 */
export async function noiseImage(dir: string, side: number, seed: number): Promise<string> {
  const path = join(dir, `noise-${side}-${seed}.ppm`);
  const rng = Prng.forLabel(seed, "noise-image");
  const pixels = Buffer.alloc(side * side * 3);
  for (let i = 0; i < pixels.length; i++) pixels[i] = Math.floor(rng.next() * 256);
  await writeFile(path, Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), pixels]));
  return path;
}

/**
 * llama-mtmd-cli answers one image (or audio) prompt with a text GGUF and an mmproj: it
 * must encode the media and generate. Returns what it generated (stdout), for comparison
 * between pairs. `args` go to llama-mtmd-cli as they are (e.g. an image token budget).
 */
export async function mtmdAnswer(model: string, mmproj: string, image: string, chatTemplate: string, args: readonly string[] = []): Promise<string> {
  const run = await runMtmdCli({ model, mmproj, image, prompt: "Describe.", args: ["--chat-template", chatTemplate, ...args] });
  expect(run.ok, run.stderr.slice(-3000)).toBe(true);
  expect(run.stderr).toMatch(/encoding mtmd batch/);
  return run.stdout;
}

/** A tensor's values widened to F32, whatever its stored type. */
export async function valuesF32(m: GgufModel, name: string): Promise<Float32Array> {
  const t = m.findTensor(name);
  if (t === undefined) throw new Error(`no ${name}`);
  return toF32(t.type, await readTensorData(t), t.shape.reduce((a, b) => a * b, 1));
}

/**
 * llama-mtmd-cli answers an image prompt with our text file and mmproj; and with the native
 * text model (same weights), our mmproj answers exactly as the native one does. Returns the
 * native pair, written to `dir`.
 */
export async function expectAnswersLikeNative(
  p: ClipProof,
  dir: string,
  image: string,
  chatTemplate: string,
  args: readonly string[] = [],
): Promise<FixturePaths> {
  const ours = await mtmdAnswer(p.textPath, p.mmprojPath, image, chatTemplate, args);
  expect(ours.length).toBeGreaterThan(0);
  const native = await writeFixture(p.native, dir);
  const withOurs = await mtmdAnswer(native.text, p.mmprojPath, image, chatTemplate, args);
  const withNative = await mtmdAnswer(native.text, native.mmproj!, image, chatTemplate, args);
  expect(withOurs).toBe(withNative);
  return native;
}

/** IEEE half to float from its bits, written out here so checks of a promote do not lean on @compat/tensor-ops. */
export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac === 0 ? sign * Infinity : NaN;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/**
 * What a projector computes for one image (or audio clip): the embeddings stock
 * llama-mtmd-cli's clip.cpp hands the text model, dumped through its MTMD_DEBUG_EMBEDDINGS
 * hook (a file of int32 n_tokens, int32 n_embd, then the F32 values).
 */
export async function mediaEmbeddings(model: string, mmproj: string, media: string, chatTemplate: string, args: readonly string[] = []): Promise<Float32Array> {
  const dump = join(dirname(mmproj), `embeddings-${createHash("sha256").update(mmproj + media).digest("hex").slice(0, 12)}.bin`);
  const run = await runMtmdCli({ model, mmproj, image: media, prompt: "Describe.", nPredict: 1, args: ["--chat-template", chatTemplate, ...args], env: { MTMD_DEBUG_EMBEDDINGS: dump } });
  expect(run.ok, run.stderr.slice(-3000)).toBe(true);
  const bytes = await readFile(dump);
  const [tokens, width] = [bytes.readInt32LE(0), bytes.readInt32LE(4)];
  expect(bytes.length, "the dump holds n_tokens x n_embd floats").toBe(8 + 4 * tokens * width);
  return new Float32Array(bytes.buffer.slice(bytes.byteOffset + 8, bytes.byteOffset + bytes.length));
}

/**
 * Two projectors' embeddings (embeddingDistance) further apart than this come from different
 * computations. Storing a toy tower's weights BF16 where the twin holds F32 moves them by
 * 0.3-0.7% (the BF16 tower tests); reruns of one pair are bit-identical.
 */
export const EMBEDDINGS_DIFFER = 0.01;

/** Relative RMS difference of two embedding sets: ||a - b|| / ||b||. */
export function embeddingDistance(a: Float32Array, b: Float32Array): number {
  expect(a.length, "same number of embedding values").toBe(b.length);
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < a.length; i++) {
    diff += (a[i]! - b[i]!) ** 2;
    norm += b[i]! ** 2;
  }
  return Math.sqrt(diff / norm);
}
