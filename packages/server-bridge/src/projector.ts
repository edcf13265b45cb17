import type { TranslatedView } from "@compat/handlers";

/** What @compat/clip exports, as far as the bridge needs it. */
type ClipViewFn = (source: string) => Promise<TranslatedView | null> | TranslatedView | null;

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
  | { kind: "layer"; path: string } // a separate projector blob (older vision models): served as it is
  | { kind: "embedded"; view: TranslatedView } // the clip view of the model file itself, to be cached
  | null;

/**
 * The one place that decides a model's `--mmproj`: a projector layer when the manifest
 * has one, else the clip view @compat/clip finds inside the model file, else none.
 */
export async function projectorFor(model: { modelPath: string; projectors: readonly string[] }, clipView?: ClipViewFn | null): Promise<ProjectorSource> {
  if (model.projectors.length > 0) return { kind: "layer", path: model.projectors[0]! };
  const fn = clipView === null ? undefined : (clipView ?? (await loadClipView()));
  if (!fn) return null;
  const view = await fn(model.modelPath);
  return view ? { kind: "embedded", view } : null;
}
