import { archKey, GgufError, readGguf, type GgufModel } from "@compat/gguf";
import { compatEnabled, translateModel, type TranslatedView, type TranslateOptions } from "@compat/handlers";
import { TranslationCache, type CacheKind, type CacheOptions } from "./cache";
import { projectorFor, type ClipViewFn } from "./projector";
import type { ResolvedModel } from "./store";
import type { StoreMount } from "./store-mount";

export interface PrepareOptions {
  /** A cache, or options for one (default location and limit). */
  cache?: TranslationCache | CacheOptions;
  env?: Record<string, string | undefined>;
  signal?: AbortSignal;
  /** Progress of a cache write (only when an entry is being written). */
  onProgress?(event: { file: string; kind: CacheKind; written: number; total: number }): void;
  /** One line per step ("translating …", "cached …"), for logs. */
  onStatus?(line: string): void;
  /** Override @compat/clip's clipView (null: never look for an embedded projector). */
  clipView?: ClipViewFn | null;
  /** Serve from this mount instead of the cache: nothing is written, the files are the mount's. */
  mount?: StoreMount;
}

/** A model's files as llama-server will read them, with the facts its arguments depend on. */
export interface PreparedModel {
  resolved: ResolvedModel;
  /** The GGUF llama-server loads: a cache entry when translated, the original path otherwise. */
  modelPath: string;
  translated: boolean;
  /** The translation came from the cache (no write). */
  cacheHit: boolean;
  mmproj?: string;
  /** general.architecture of the source file. */
  architecture: string;
  /** The source file has `<arch>.pooling_type`: serve with --embedding (as Ollama decides it). */
  embedding: boolean;
  /** The served GGUF carries tokenizer.chat_template. */
  hasChatTemplate: boolean;
}

/** What llama-server's arguments depend on, from the source model and its translation (null: served as it is). */
export function modelFacts(source: GgufModel, view: TranslatedView | null): Pick<PreparedModel, "architecture" | "embedding" | "hasChatTemplate"> {
  const architecture = source.getString("general.architecture", "");
  return {
    architecture,
    embedding: architecture !== "" && source.has(archKey(architecture, "pooling_type")),
    hasChatTemplate: (view?.model ?? source).has("tokenizer.chat_template"),
  };
}

export function asCache(c: TranslationCache | CacheOptions | undefined, env?: Record<string, string | undefined>): TranslationCache {
  return c instanceof TranslationCache ? c : new TranslationCache({ env, ...c });
}

/**
 * Makes a resolved model servable: its text GGUF (and clip projector, when it embeds one)
 * translated into the cache once, or with `mount`, the mount's files; files that need
 * nothing are passed through untouched.
 */
export async function prepareModel(resolved: ResolvedModel, opts: PrepareOptions = {}): Promise<PreparedModel> {
  if (opts.mount) return opts.mount.prepare(resolved);
  const env = opts.env ?? process.env;
  const cache = asCache(opts.cache, env);
  let source: GgufModel;
  try {
    source = await readGguf(resolved.modelPath);
  } catch (e) {
    // The one check of ours gguf.cpp does not make (it keeps strings as raw bytes); anything
    // else our reader refuses, llama.cpp refuses too, and the typed error says it better.
    if (!(e instanceof GgufError) || e.code !== "INVALID_UTF8") throw e;
    return unreadable(resolved, e, cache, opts, env);
  }
  let closeSource = true;
  try {
    const translateOpts: TranslateOptions = { env, profile: cache.profile };
    const view = translateModel(source, translateOpts);
    const out: PreparedModel = { resolved, modelPath: resolved.modelPath, translated: false, cacheHit: false, ...modelFacts(source, view) };
    if (view) {
      closeSource = false; // the view reads from it; view.close() closes it
      try {
        const entry = await cache.obtain(resolved.modelPath, "text", view, {
          sourceDigest: resolved.modelDigest,
          signal: opts.signal,
          // a hit says "cached", and nothing about translating
          onMiss: () => opts.onStatus?.(`translating ${resolved.name} (${view.report.handlers.map((h) => h.name).join(", ")})`),
          onProgress: (written, total) => opts.onProgress?.({ file: resolved.modelPath, kind: "text", written, total }),
          ...(opts.onStatus ? { onWait: opts.onStatus } : {}),
        });
        opts.onStatus?.(`${entry.hit ? "cached" : "translated"} ${resolved.name} -> ${entry.path}`);
        Object.assign(out, { modelPath: entry.path, translated: true, cacheHit: entry.hit });
      } finally {
        await view.close();
      }
    }
    if (compatEnabled(env) || resolved.projectors.length > 0) await attachProjector(out, resolved, cache, opts, env);
    return out;
  } finally {
    if (closeSource) await source.close();
  }
}

/**
 * The model file has a string that is not UTF-8: our reader refuses it, llama.cpp may load it,
 * and a file we cannot read is not one we can recognise as Ollama's. llama-server gets it as
 * it is and is the judge. A separate projector layer is still prepared; a tower embedded in
 * the file is not looked for.
 */
async function unreadable(resolved: ResolvedModel, e: GgufError, cache: TranslationCache, opts: PrepareOptions, env: Record<string, string | undefined>): Promise<PreparedModel> {
  opts.onStatus?.(`not translated: ${e.message}; llama-server reads ${resolved.name} as it is`);
  // hasChatTemplate: unknown, so the bridge does not override whatever template the file carries
  const out: PreparedModel = { resolved, modelPath: resolved.modelPath, translated: false, cacheHit: false, architecture: "", embedding: false, hasChatTemplate: true };
  if (resolved.projectors.length > 0) await attachProjector(out, resolved, cache, opts, env);
  return out;
}

/** Sets out.mmproj: the model's projector layer (translated when needed) or its embedded tower's view, written to the cache. */
async function attachProjector(out: PreparedModel, resolved: ResolvedModel, cache: TranslationCache, opts: PrepareOptions, env: Record<string, string | undefined>): Promise<void> {
  const projector = await projectorFor(resolved, { clipView: opts.clipView, env, profile: cache.profile });
  if (projector?.kind === "file") out.mmproj = projector.path;
  else if (projector?.kind === "view") {
    try {
      const entry = await cache.obtain(projector.sourcePath, "mmproj", projector.view, {
        sourceDigest: projector.sourceDigest,
        signal: opts.signal,
        onMiss: () => opts.onStatus?.(`translating projector of ${resolved.name} (${projector.view.report.handlers.map((h) => h.name).join(", ")})`),
        onProgress: (written, total) => opts.onProgress?.({ file: projector.sourcePath, kind: "mmproj", written, total }),
        ...(opts.onStatus ? { onWait: opts.onStatus } : {}),
      });
      opts.onStatus?.(`${entry.hit ? "cached" : "wrote"} projector of ${resolved.name} -> ${entry.path}`);
      out.mmproj = entry.path;
    } finally {
      await projector.view.close();
    }
  }
}
