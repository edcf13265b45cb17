/**
 * What every fuzz input goes through: parse, and for the full pipeline the clip view, detect,
 * and under both translation profiles the text translation and the clip-side translation,
 * reads of each view, and an atomic write of the text view to a temp path (re-read afterwards). The outcome is "ok", "nothing" (not translated)
 * or the code of a typed error; anything else (a RangeError, a TypeError, a non-typed
 * rejection, an output that does not parse) is thrown as a FuzzFailure.
 */
import { join } from "node:path";
import { readdir, rm, stat } from "node:fs/promises";
import { GgufError, bufferSource, parseGguf, readGguf } from "@compat/gguf";
import { TRANSLATION_PROFILES, TranslationError, detectHandlers, translateModel, type TranslatedView } from "@compat/handlers";
import { TensorOpsError } from "@compat/tensor-ops";
import { clipHandlers, clipView } from "@compat/clip";
import { Prng, hash32 } from "@compat/testkit";

export class FuzzFailure extends Error {
  constructor(
    readonly stage: string,
    readonly error: unknown,
  ) {
    super(`${stage}: ${describe(error)}`);
    this.name = "FuzzFailure";
  }
}

export function describe(e: unknown): string {
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code;
    return `${e.constructor.name}${typeof code === "string" ? `[${code}]` : ""}: ${e.message.split("\n")[0]}`;
  }
  return `non-error thrown: ${String(e)}`;
}

const BUILTIN_ERRORS: ReadonlySet<unknown> = new Set([Error, RangeError, TypeError, SyntaxError, ReferenceError, EvalError, URIError, AggregateError]);

/** A typed error: one of the packages' error classes (or another non-builtin Error class with a string `code`, such as @compat/clip's). */
export function isTypedError(e: unknown): e is Error & { code: string } {
  if (e instanceof GgufError || e instanceof TranslationError || e instanceof TensorOpsError) return true;
  return e instanceof Error && !BUILTIN_ERRORS.has(e.constructor) && typeof (e as { code?: unknown }).code === "string";
}

export type Outcome = "ok" | "nothing" | `error:${string}`;

async function stage<T>(name: string, f: () => T | Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof FuzzFailure || isTypedError(e)) throw e;
    throw new FuzzFailure(name, e);
  }
}

/** Parse only: the synchronous parser over the whole buffer. */
export function parseOnly(bytes: Uint8Array, name: string): Outcome {
  try {
    parseGguf(bytes, name, { fileSize: bytes.length });
    return "ok";
  } catch (e) {
    if (isTypedError(e)) return `error:${e.code}`;
    throw new FuzzFailure("parse", e);
  }
}

export interface PipelineOptions {
  /** Directory for the atomic write (each input writes, re-reads and removes `<index>.gguf`). */
  readonly tmpDir: string;
  /** Seeds the choice of view ranges. */
  readonly seed: number;
  readonly index: number;
}

/** The full pipeline (see the file comment). */
export async function fullPipeline(bytes: Uint8Array, name: string, opts: PipelineOptions): Promise<Outcome> {
  try {
    return await pipeline(bytes, name, opts);
  } catch (e) {
    if (e instanceof FuzzFailure) throw e;
    if (isTypedError(e)) return `error:${e.code}`;
    throw new FuzzFailure("pipeline", e);
  }
}

async function pipeline(bytes: Uint8Array, name: string, opts: PipelineOptions): Promise<Outcome> {
  const model = await stage("read", () => readGguf(bufferSource(bytes, name)));
  await stage("clipView", async () => void (await clipView(model)));
  await stage("detect", () => detectHandlers(model));
  // Both profiles, text side and clip side: each view is read over seeded ranges; the
  // text view under the default profile is also written atomically and re-read.
  let outcome: Outcome = "nothing";
  for (const profile of TRANSLATION_PROFILES) {
    const clipSide = await stage(`clipView:${profile}`, () => translateModel(model, { handlers: clipHandlers, profile }));
    if (clipSide !== null) await readRanges(clipSide, `clip:${profile}`, opts);
    const view: TranslatedView | null = await stage(`translate:${profile}`, () => translateModel(model, { profile }));
    if (view === null) continue;
    await readRanges(view, profile, opts);
    if (profile === "native") await writeAndReread(view, opts);
    outcome = "ok";
  }
  return outcome;
}

async function readRanges(view: TranslatedView, label: string, opts: PipelineOptions): Promise<void> {
  const rng = new Prng(hash32(`view:${label}:${opts.index}`, opts.seed));
  const size = await stage(`layout:${label}`, () => view.size);
  const ranges: Array<[number, number]> = [
    [0, Math.min(size, 4096)],
    [Math.max(0, size - 100), 200],
  ];
  for (let i = 0; i < 3; i++) ranges.push([rng.int(size + 1), rng.int(1 << 16)]);
  for (const [at, n] of ranges) {
    const got = await stage(`view.read:${label}`, () => view.read(at, n));
    if (got.length !== Math.max(0, Math.min(at + n, size) - at)) throw new FuzzFailure(`view.read:${label}`, new Error(`read(${at}, ${n}) gave ${got.length} bytes of a ${size}-byte view`));
  }
}

async function writeAndReread(view: TranslatedView, opts: PipelineOptions): Promise<void> {
  const size = await stage("layout", () => view.size);
  const out = join(opts.tmpDir, `${opts.index}.gguf`);
  try {
    await stage("writeTo", () => view.writeTo(out));
    // a written file is complete: the view's size, and it parses
    const written = (await stat(out)).size;
    if (written !== size) throw new FuzzFailure("writeTo", new Error(`wrote ${written} bytes of a ${size}-byte view`));
    const back = await stage("reread", () => readGguf(out));
    await back.close();
  } finally {
    // success or typed failure, the atomic writer leaves no temp file
    const left = (await readdir(opts.tmpDir)).filter((e) => e.endsWith(".tmp"));
    await rm(out, { force: true });
    if (left.length > 0) throw new FuzzFailure("writeTo", new Error(`temp files left: ${left.join(", ")}`));
  }
}
