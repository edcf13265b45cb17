import { blobDigest, type ResolvedModel } from "@compat/store";
import type { Mmproj } from "@compat/views";
import { TranslationCache, type CacheKind, type CacheOptions } from "./cache";
import { preparedModel, servedViews, type ModelPreparer, type PreparedModel } from "./preparer";

export interface PrepareOptions {
  /** A cache, or options for one (default location and limit). */
  cache?: TranslationCache | CacheOptions;
  env?: Record<string, string | undefined>;
  signal?: AbortSignal;
  /** Progress of a cache write (only when an entry is being written). */
  onProgress?(event: { file: string; kind: CacheKind; written: number; total: number }): void;
  /** One line per step ("translating …", "cached …"), for logs. */
  onStatus?(line: string): void;
}

function asCache(c: TranslationCache | CacheOptions | undefined, env?: Record<string, string | undefined>): TranslationCache {
  return c instanceof TranslationCache ? c : new TranslationCache({ env, ...c });
}

/** The translation cache as a ModelPreparer: prepareModel with these options. */
export function cachePreparer(opts: PrepareOptions = {}): ModelPreparer {
  return { prepare: (resolved) => prepareModel(resolved, opts) };
}

/**
 * Makes a resolved model servable from the translation cache: what llama.cpp gets from it
 * (@compat/views: its text GGUF, and its projector, a manifest layer or the tower embedded in
 * the file) written into the cache once where it is a translation; files that need nothing are
 * passed through untouched.
 */
export async function prepareModel(resolved: ResolvedModel, opts: PrepareOptions = {}): Promise<PreparedModel> {
  const env = opts.env ?? process.env;
  const cache = asCache(opts.cache, env);
  const views = await servedViews(resolved, env, cache.profile, opts.onStatus);
  try {
    const { text, mmproj } = views;
    let files = { modelPath: resolved.modelPath, translated: false, cacheHit: false };
    if (text) {
      const handlers = text.report.handlers.map((h) => h.name);
      const entry = await cache.obtain(resolved.modelPath, "text", text, {
        sourceDigest: resolved.modelDigest,
        signal: opts.signal,
        // a hit says "cached", and nothing about translating
        onMiss: () => opts.onStatus?.(`translating ${resolved.name} (${handlers.join(", ")})`),
        onProgress: (written, total) => opts.onProgress?.({ file: resolved.modelPath, kind: "text", written, total }),
        ...(opts.onStatus ? { onWait: opts.onStatus } : {}),
      });
      opts.onStatus?.(`${entry.hit ? "cached" : "translated"} ${resolved.name} -> ${entry.path}`);
      files = { modelPath: entry.path, translated: true, cacheHit: entry.hit };
    }
    return preparedModel(resolved, views, { ...files, mmproj: mmproj ? await projectorPath(mmproj, resolved, cache, opts) : undefined });
  } finally {
    await views.close();
  }
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
