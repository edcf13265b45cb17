import { dirname, join } from "node:path";
import { readFile, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { readGguf, type GgufModel } from "@compat/gguf";
import { translate, translateModel, type TranslatedView, type TranslationProfile } from "@compat/handlers";
import {
  generateFixture,
  logitDistance,
  runLoaderInSubprocess,
  PRINTABLE_ASCII_GRAMMAR,
  runMtmdCli,
  serverCompletion,
  startLlamaServer,
  writeFixture,
  type FixtureOptions,
  type FixturePaths,
  type GeneratedFixture,
  type SubprocessLoadResult,
} from "@compat/testkit";
import { expect } from "vitest";
import { compareWithNative, type TwinDifferences, type TwinOptions } from "./twin";

/**
 * Two files compute differently when they score next tokens further apart than this (in
 * log-probability, see logitDistance). Rounding moves it by about 1e-5, and both files run on
 * the same pinned CPU variant anyway; a test that claims a translation changed what a model
 * computes asks for 1,000 times that, so the claim rests on the translation's bytes and keys,
 * never on a near-tie between two greedy tokens.
 */
export const COMPUTES_DIFFERENTLY = 0.01;
/** Below this, two files compute the same (what is left is float rounding, e.g. of a softmax over another vocabulary size). */
export const SAME_COMPUTATION = 1e-4;

/**
 * How differently two GGUFs score the next token over `steps` greedy steps from `prompt`
 * (each in a fresh loader process; the top 64 tokens of each step).
 */
export async function distributionDistance(a: string, b: string, steps = 4, prompt = "Hello"): Promise<number> {
  const run = async (path: string) => {
    const r = await runLoaderInSubprocess(path, { maxTokens: steps, prompt, topProbabilities: 64 });
    if (!r.ok || !r.steps) throw new Error(`${path} did not generate: ${r.ok ? "no probabilities" : r.error}`);
    return r.steps;
  };
  return logitDistance(await run(a), await run(b));
}

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
  /** With the `nativeTwin` option: the native twin on disk, and what llama.cpp did with it. */
  twin?: NativeTwinProof;
}

export interface NativeTwinProof {
  paths: FixturePaths;
  /** Undefined when the twin was not loaded (`load: false`). */
  load?: SubprocessLoadResult;
}

export interface NativeTwinOptions {
  /** Run the twin like the translation (greedy tokens, or an embedding). Default true. */
  load?: boolean;
  embedding?: boolean;
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
  opts: Omit<FixtureOptions, "layout"> & {
    embedding?: boolean;
    twin?: TwinOptions;
    /** Also prove the native twin: it loads in real llama.cpp and no handler claims it (see proveNativeTwin). */
    nativeTwin?: boolean | Pick<NativeTwinOptions, "load">;
    /** Translation profile (default native, the engine's default). */
    profile?: TranslationProfile;
  },
): Promise<HandlerProof> {
  const { embedding, twin, nativeTwin, profile, ...fixtureOpts } = opts;
  const ollama = await writeFixture(generateFixture(arch, { ...fixtureOpts, layout: "ollama" }), dir);
  const before = await sha256(ollama.text);
  const topts = profile !== undefined ? { profile } : {};
  const view = await translate(ollama.text, topts);
  if (view === null) throw new Error(`no handler translated the ${arch} ollama fixture`);
  const outPath = join(dir, `${arch}-${opts.variant ?? "default"}-${profile ?? "native"}-translated.gguf`);
  await view.writeTo(outPath);
  const load = await runLoaderInSubprocess(outPath, embedding ? { embedding: true } : { maxTokens: 4 });
  const native = generateFixture(arch, { ...fixtureOpts, layout: "native" });
  const translatedModel = await readGguf(outPath);
  const diff = await compareWithNative(translatedModel, native.text, twin);
  const after = await sha256(ollama.text);
  await expectReadMatchesFile(view, outPath);
  expect(await translate(outPath, topts), "translating the translated file again must be a no-op").toBeNull();
  await view.close();
  await translatedModel.close();
  const twinProof = nativeTwin
    ? await proveNativeTwin(dir, native, { ...(typeof nativeTwin === "object" ? nativeTwin : {}), embedding: embedding === true })
    : undefined;
  return { view, outPath, native, load, diff, sourceDigest: { before, after }, translatedModel, ...(twinProof ? { twin: twinProof } : {}) };
}

/**
 * The other half of every proof: the native twin (what llama.cpp's own converter
 * writes for the same weights) is written to `dir`, real llama.cpp runs it, and no
 * handler claims it: translate() on the file and translateModel() on the parsed
 * model are both null.
 */
export async function proveNativeTwin(dir: string, native: GeneratedFixture, opts: NativeTwinOptions = {}): Promise<NativeTwinProof> {
  const paths = await writeFixture(native, dir);
  const load = opts.load === false ? undefined : await runLoaderInSubprocess(paths.text, opts.embedding ? { embedding: true } : { maxTokens: 4 });
  expect(await translate(paths.text), "no handler may translate the native twin").toBeNull();
  const parsed = await readGguf(paths.text);
  try {
    expect(translateModel(parsed), "no handler may translate the native twin (parsed)").toBeNull();
  } finally {
    await parsed.close();
  }
  return { paths, ...(load ? { load } : {}) };
}

/**
 * llama-mtmd-cli encodes an image with the twin's mmproj: a `side` x `side` binary
 * PPM of one grey `level` (llama.cpp's image loader reads PNM). The fixtures carry no
 * chat template (neither converter is given one), so `chatTemplate` names llama.cpp's built-in one.
 */
export async function expectMtmdEncodesImage(
  paths: FixturePaths,
  image: { side: number; level: number },
  chatTemplate: string,
): Promise<void> {
  if (paths.mmproj === undefined) throw new Error(`${paths.text} has no mmproj`);
  const imagePath = join(dirname(paths.text), `grey-${image.side}.ppm`);
  const header = Buffer.from(`P6\n${image.side} ${image.side}\n255\n`);
  await writeFile(imagePath, Buffer.concat([header, Buffer.alloc(image.side * image.side * 3, image.level)]));
  const run = await runMtmdCli({
    model: paths.text,
    mmproj: paths.mmproj,
    image: imagePath,
    prompt: "Describe.",
    args: ["--chat-template", chatTemplate],
  });
  expect(run.ok, run.stderr).toBe(true);
  expect(run.stderr).toMatch(/encoding mtmd batch/);
}

export const NO_DIFFERENCES: TwinDifferences = { kv: [], missingTensors: [], extraTensors: [], layout: [], data: [] };

/** read(offset, length) over a spread of ranges (header, boundaries, tensor data) equals the file. */
export async function expectReadMatchesFile(view: TranslatedView, path: string): Promise<void> {
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

/**
 * How real llama.cpp tokenizes `prompt` with this file: llama-server's /tokenize with
 * add_special (so BOS is added exactly when the file asks for it), ids and pieces.
 */
export async function serverTokenize(path: string, prompt: string): Promise<Array<{ id: number; piece: string }>> {
  const server = await startLlamaServer({ model: path });
  try {
    const response = await fetch(`${server.url}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ content: prompt, add_special: true, with_pieces: true }),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    const body = (await response.json()) as { tokens: Array<{ id: number; piece: string | number[] }> };
    return body.tokens.map((t) => ({ id: t.id, piece: typeof t.piece === "string" ? t.piece : JSON.stringify(t.piece) }));
  } finally {
    await server.stop();
  }
}

/**
 * Whether real llama.cpp ends generation at `token`: llama-server is made to pick it
 * greedily (logit bias) with end-of-generation honoured, and we look at why it stopped
 * and what it printed.
 */
export async function serverStopsAt(path: string, token: number): Promise<{ stopType: string; predicted: number; content: string }> {
  const server = await startLlamaServer({ model: path });
  try {
    const response = await fetch(`${server.url}/completion`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Hello", n_predict: 3, temperature: 0, top_k: 1, seed: 0, cache_prompt: false, logit_bias: [[token, 100]] }),
    });
    const text = await response.text();
    expect(response.status, text).toBe(200);
    const raw = JSON.parse(text) as { stop_type?: string; tokens_predicted?: number; content?: string };
    return { stopType: String(raw.stop_type), predicted: Number(raw.tokens_predicted), content: String(raw.content ?? "") };
  } finally {
    await server.stop();
  }
}

/**
 * The prompt as llama.cpp gives it back: /completion answers with the prompt's tokens
 * detokenized by llama_detokenize (specials shown), which applies the vocabulary's
 * clean-up of spaces before punctuation, switched on or off by the pre-tokenizer type.
 */
export async function serverPromptEcho(path: string, prompt: string): Promise<string> {
  const server = await startLlamaServer({ model: path });
  try {
    const response = await fetch(`${server.url}/completion`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      // printable ASCII keeps the tiny model's one generated token valid UTF-8 (see PRINTABLE_ASCII_GRAMMAR)
      body: JSON.stringify({ prompt, n_predict: 1, temperature: 0, top_k: 1, seed: 0, cache_prompt: false, grammar: PRINTABLE_ASCII_GRAMMAR }),
    });
    const raw = await response.text();
    expect(response.status, raw).toBe(200);
    return String((JSON.parse(raw) as { prompt?: unknown }).prompt);
  } finally {
    await server.stop();
  }
}

/**
 * Keys the Qwen twins may differ in: for the qwen2 pre-tokenizer llama.cpp adds no BOS,
 * which is what the native file states (bos = <|endoftext|>, add_bos_token false) and
 * Ollama's files leave unsaid.
 */
export const QWEN_UNUSED_BOS_KEYS: readonly string[] = ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token"];

/** Real llama.cpp generated 4 greedy tokens from the native twin, and the same 4 from the translated file. */
export function expectTwinTokens(p: HandlerProof): void {
  const nativeLoad = p.twin!.load!;
  expect(nativeLoad.ok ? nativeLoad.tokens.length : nativeLoad.error).toBe(4);
  expect(p.load.ok ? p.load.tokens : p.load.error).toEqual(nativeLoad.ok ? nativeLoad.tokens : []);
}

/** llama-server (built from the same llama.cpp) serves the translated file and answers as it does for the twin. */
export async function expectServerAnswersLikeTwin(p: HandlerProof): Promise<void> {
  const answers: number[][] = [];
  for (const model of [p.outPath, p.twin!.paths.text]) {
    const server = await startLlamaServer({ model });
    try {
      answers.push((await serverCompletion(server, { prompt: "Hello", nPredict: 4 })).tokens);
    } finally {
      await server.stop();
    }
  }
  expect(answers[0]).toHaveLength(4);
  expect(answers[0]).toEqual(answers[1]);
}
