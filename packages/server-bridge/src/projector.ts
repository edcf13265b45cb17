import { basename } from "node:path";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";

/** @compat/clip's clipView, as far as the bridge needs it. */
export type ClipViewFn = (
  source: string,
  opts?: { env?: Record<string, string | undefined>; profile?: TranslationProfile },
) => Promise<TranslatedView | null> | TranslatedView | null;

let clipViewPromise: Promise<ClipViewFn | undefined> | undefined;

/**
 * @compat/clip's `clipView`, if that package provides it (feature-detected, so the bridge
 * works before and after it lands: absent means "no embedded projector").
 */
export function loadClipView(): Promise<ClipViewFn | undefined> {
  clipViewPromise ??= import("@compat/clip").then(
    (mod: Record<string, unknown>) => (typeof mod.clipView === "function" ? (mod.clipView as ClipViewFn) : undefined),
    () => undefined,
  );
  return clipViewPromise;
}

/** Where the projector of a model comes from. */
export type ProjectorSource =
  /** A file llama.cpp's clip loader takes as it is (a native projector layer). */
  | { kind: "file"; path: string }
  /** The clip view of a file (the model itself, or an old projector layer that needs translating), to be cached. */
  | { kind: "view"; sourcePath: string; sourceDigest?: string; view: TranslatedView }
  | null;

/** `sha256:<hex>` from a blob's file name (blobs/sha256-<hex>), else undefined. */
function blobDigest(path: string): string | undefined {
  const m = /^sha256-([0-9a-f]{64})$/.exec(basename(path));
  return m ? `sha256:${m[1]}` : undefined;
}

/**
 * The one place that decides a model's `--mmproj`: a projector layer when the manifest has
 * one (through @compat/clip's view when it needs translating, as Ollama's old LLaVA
 * projectors do), else the clip view @compat/clip finds inside the model file itself,
 * else none.
 */
export async function projectorFor(
  model: { modelPath: string; modelDigest?: string; projectors: readonly string[] },
  opts: { clipView?: ClipViewFn | null; env?: Record<string, string | undefined>; profile?: TranslationProfile } = {},
): Promise<ProjectorSource> {
  const fn = opts.clipView === null ? undefined : (opts.clipView ?? (await loadClipView()));
  const env = { ...(opts.env ? { env: opts.env } : {}), ...(opts.profile !== undefined ? { profile: opts.profile } : {}) };
  const layer = model.projectors[0];
  if (layer !== undefined) {
    const view = fn ? await fn(layer, env) : null;
    return view ? { kind: "view", sourcePath: layer, sourceDigest: blobDigest(layer), view } : { kind: "file", path: layer };
  }
  if (!fn) return null;
  const view = await fn(model.modelPath, env);
  return view ? { kind: "view", sourcePath: model.modelPath, sourceDigest: model.modelDigest, view } : null;
}
