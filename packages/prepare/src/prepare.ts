import { basename } from "node:path";
import { archKey, GgufError, type GgufModel } from "@compat/gguf";
import type { TranslatedView } from "@compat/handlers";
import { openViews, projectorOf, type FileStatus, type Mmproj } from "@compat/views";
import { TranslationCache, type CacheKind, type CacheOptions } from "./cache";
import type { ResolvedModel } from "@compat/store";
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
  /** @compat/views' status of the model file ("native" for a file our reader refuses, served as it is). */
  status: FileStatus;
  /** The text handlers that translated it (empty: served as it is). */
  handlers: string[];
  /** general.architecture of the source file. */
  architecture: string;
  /** The source file has `<arch>.pooling_type`: serve with --embedding (as Ollama decides it). */
  embedding: boolean;
  /** The served GGUF carries tokenizer.chat_template. */
  hasChatTemplate: boolean;
}

export function asCache(c: TranslationCache | CacheOptions | undefined, env?: Record<string, string | undefined>): TranslationCache {
  return c instanceof TranslationCache ? c : new TranslationCache({ env, ...c });
}

/**
 * Makes a resolved model servable: what llama.cpp gets from it (@compat/views: its text GGUF,
 * and its projector, a manifest layer or the tower embedded in the file) written into the cache
 * once where it is a translation, or with `mount`, the mount's files; files that need nothing
 * are passed through untouched.
 */
export async function prepareModel(resolved: ResolvedModel, opts: PrepareOptions = {}): Promise<PreparedModel> {
  if (opts.mount) return opts.mount.prepare(resolved);
  const env = opts.env ?? process.env;
  const cache = asCache(opts.cache, env);
  let views;
  try {
    views = await openViews(resolved.modelPath, { env, profile: cache.profile, projectors: resolved.projectors });
  } catch (e) {
    // The one check of ours gguf.cpp does not make (it keeps strings as raw bytes); anything
    // else our reader refuses, llama.cpp refuses too, and the typed error says it better.
    if (!(e instanceof GgufError) || e.code !== "INVALID_UTF8") throw e;
    return unreadable(resolved, e, cache, opts, env);
  }
  try {
    const { text, mmproj } = views;
    const out: PreparedModel = {
      resolved,
      modelPath: resolved.modelPath,
      translated: false,
      cacheHit: false,
      status: views.status,
      handlers: text?.report.handlers.map((h) => h.name) ?? [],
      ...modelFacts(views.model, text),
    };
    if (text) {
      const entry = await cache.obtain(resolved.modelPath, "text", text, {
        sourceDigest: resolved.modelDigest,
        signal: opts.signal,
        // a hit says "cached", and nothing about translating
        onMiss: () => opts.onStatus?.(`translating ${resolved.name} (${out.handlers.join(", ")})`),
        onProgress: (written, total) => opts.onProgress?.({ file: resolved.modelPath, kind: "text", written, total }),
        ...(opts.onStatus ? { onWait: opts.onStatus } : {}),
      });
      opts.onStatus?.(`${entry.hit ? "cached" : "translated"} ${resolved.name} -> ${entry.path}`);
      Object.assign(out, { modelPath: entry.path, translated: true, cacheHit: entry.hit });
    }
    if (mmproj) out.mmproj = await projectorPath(mmproj, resolved, cache, opts);
    return out;
  } finally {
    await views.close();
  }
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

/**
 * The model file has a string that is not UTF-8: our reader refuses it, llama.cpp may load it,
 * and a file we cannot read is not one we can recognise as Ollama's. llama-server gets it as
 * it is and is the judge. A separate projector layer is still prepared; a tower embedded in
 * the file is not looked for.
 */
async function unreadable(resolved: ResolvedModel, e: GgufError, cache: TranslationCache, opts: PrepareOptions, env: Record<string, string | undefined>): Promise<PreparedModel> {
  opts.onStatus?.(`not translated: ${e.message}; llama-server reads ${resolved.name} as it is`);
  // hasChatTemplate: unknown, so the bridge does not override whatever template the file carries
  const out: PreparedModel = { resolved, modelPath: resolved.modelPath, translated: false, cacheHit: false, status: "native", handlers: [], architecture: "", embedding: false, hasChatTemplate: true };
  const layer = resolved.projectors[0];
  if (layer !== undefined) {
    const mmproj = await projectorOf(layer, { env, profile: cache.profile });
    try {
      out.mmproj = await projectorPath(mmproj, resolved, cache, opts);
    } finally {
      if (mmproj.kind === "view") await mmproj.view.close();
    }
  }
  return out;
}

/** The `--mmproj` path: a projector file as it is, or its view (or the embedded tower's) written to the cache. */
async function projectorPath(mmproj: Mmproj, resolved: ResolvedModel, cache: TranslationCache, opts: PrepareOptions): Promise<string> {
  if (mmproj.kind === "file") return mmproj.path;
  const { view } = mmproj;
  const sourcePath = mmproj.path ?? resolved.modelPath;
  const entry = await cache.obtain(sourcePath, "mmproj", view, {
    // the embedded tower is keyed by the model's digest, a projector layer by its own blob's
    sourceDigest: sourcePath === resolved.modelPath ? resolved.modelDigest : blobDigest(sourcePath),
    signal: opts.signal,
    onMiss: () => opts.onStatus?.(`translating projector of ${resolved.name} (${view.report.handlers.map((h) => h.name).join(", ")})`),
    onProgress: (written, total) => opts.onProgress?.({ file: sourcePath, kind: "mmproj", written, total }),
    ...(opts.onStatus ? { onWait: opts.onStatus } : {}),
  });
  opts.onStatus?.(`${entry.hit ? "cached" : "wrote"} projector of ${resolved.name} -> ${entry.path}`);
  return entry.path;
}

/** `sha256:<hex>` from a blob's file name (blobs/sha256-<hex>), else undefined. */
function blobDigest(path: string): string | undefined {
  const m = /^sha256-([0-9a-f]{64})$/.exec(basename(path));
  return m ? `sha256:${m[1]}` : undefined;
}
