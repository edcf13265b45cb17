import { join } from "node:path";
import { readFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { readGguf, type GgufModel } from "@compat/gguf";
import { translate, type TranslatedView } from "@compat/handlers";
import { generateFixture, runLoaderInSubprocess, writeFixture, type FixtureOptions, type GeneratedFixture, type SubprocessLoadResult } from "@compat/testkit";
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
 * twin generated from the same seed.
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
  await view.source.close();
  return { view, outPath, native, load, diff, sourceDigest: { before, after }, translatedModel };
}

export const NO_DIFFERENCES: TwinDifferences = { kv: [], missingTensors: [], extraTensors: [], layout: [], data: [] };
