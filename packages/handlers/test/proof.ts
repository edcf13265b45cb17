import { join } from "node:path";
import { readFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { readGguf, type GgufModel } from "@compat/gguf";
import { translate, type TranslatedView } from "@compat/handlers";
import { generateFixture, runLoaderInSubprocess, writeFixture, type FixtureOptions, type GeneratedFixture, type SubprocessLoadResult } from "@compat/testkit";
import { expect } from "vitest";
import { compareWithNative, type TwinDifferences, type TwinOptions } from "./twin";

export interface HandlerProof {
  view: TranslatedView;
  /** The translated file on disk. */
  outPath: string;
  native: GeneratedFixture;
  /** What real llama.cpp (prebuilt, via node-llama-cpp) did with the translated file. */
  load: SubprocessLoadResult;
  diff: TwinDifferences;
  /** sha256 of the Ollama fixture before and after the translation (must be equal). */
  sourceDigest: { before: string; after: string };
  translatedModel: GgufModel;
}

const sha256 = async (path: string) => createHash("sha256").update(await readFile(path)).digest("hex");

/**
 * The proof every handler gets: write the Ollama-layout fixture, translate it to a
 * file, have real llama.cpp load and run that file, and compare it with the native
 * twin generated from the same seed. It also checks, for every handler, what must
 * hold of any translation: the source file is unchanged, the view's read() serves
 * exactly the bytes written, and translating the output again is a no-op.
 */
export async function proveHandler(
  dir: string,
  arch: string,
  opts: Omit<FixtureOptions, "layout"> & { embedding?: boolean; twin?: TwinOptions },
): Promise<HandlerProof> {
  const { embedding, twin, ...fixtureOpts } = opts;
  const ollama = await writeFixture(generateFixture(arch, { ...fixtureOpts, layout: "ollama" }), dir);
  const before = await sha256(ollama.text);
  const view = await translate(ollama.text);
  if (view === null) throw new Error(`no handler translated the ${arch} ollama fixture`);
  const outPath = join(dir, `${arch}-${opts.variant ?? "default"}-translated.gguf`);
  await view.writeTo(outPath);
  const load = await runLoaderInSubprocess(outPath, embedding ? { embedding: true } : { maxTokens: 4 });
  const native = generateFixture(arch, { ...fixtureOpts, layout: "native" });
  const translatedModel = await readGguf(outPath);
  const diff = await compareWithNative(translatedModel, native.text, twin);
  const after = await sha256(ollama.text);
  await expectReadMatchesFile(view, outPath);
  expect(await translate(outPath), "translating the translated file again must be a no-op").toBeNull();
  await view.close();
  await translatedModel.close();
  return { view, outPath, native, load, diff, sourceDigest: { before, after }, translatedModel };
}

export const NO_DIFFERENCES: TwinDifferences = { kv: [], missingTensors: [], extraTensors: [], layout: [], data: [] };

/** read(offset, length) over a spread of ranges (header, boundaries, tensor data) equals the file. */
async function expectReadMatchesFile(view: TranslatedView, path: string): Promise<void> {
  const file = new Uint8Array(await readFile(path));
  expect(view.size).toBe(file.length);
  const { dataOffset, tensorOffsets } = view.layout;
  const starts = [0, 7, dataOffset - 5, dataOffset, ...tensorOffsets.map((o) => dataOffset + o - 3), file.length - 10];
  for (const start of starts) {
    const at = Math.max(0, start);
    const got = await view.read(at, 4099);
    expect(Buffer.compare(Buffer.from(got), Buffer.from(file.subarray(at, at + 4099))), `read(${at}, 4099)`).toBe(0);
  }
}
