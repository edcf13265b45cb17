import { readGguf, type ByteSource, type GgufModel } from "@compat/gguf";
import { compatEnabled } from "./env";
import { gatesOn, type Handler } from "./handler";
import { textHandlers } from "./registry";
import { buildReport, changesNothing } from "./report";
import { TranslationError } from "./errors";
import { Translation, TRANSLATION_PROFILES, type TranslationProfile } from "./translation";
import { TranslatedView } from "./view";

export interface TranslateOptions {
  /** Environment to read OLLAMA_LLAMA_CPP_COMPAT from (default process.env). */
  env?: Record<string, string | undefined>;
  /** Handler list in dispatch order (default: the registry). */
  handlers?: readonly Handler[];
  /**
   * `native` (default): also apply the handlers' named fixes of known reference gaps,
   * so the output behaves like the file llama.cpp's converter writes. `reference`:
   * reproduce Ollama's compat layer exactly, gaps included.
   */
  profile?: TranslationProfile;
}

/** The profile to use, checked (callers from JS or a CLI may pass anything). */
export function resolveProfile(profile: unknown): TranslationProfile {
  if (profile === undefined) return "native";
  if (typeof profile === "string" && (TRANSLATION_PROFILES as readonly string[]).includes(profile)) return profile as TranslationProfile;
  throw new TranslationError("UNKNOWN_PROFILE", `unknown translation profile ${JSON.stringify(profile)}; expected one of ${TRANSLATION_PROFILES.join(", ")}`);
}

/**
 * Runs the handler registry on a parsed model. Returns the translated view, or null
 * when no handler recognizes the file (every non-Ollama file), when the handlers that
 * do change nothing (an already translated file), or when compat is disabled.
 * Handlers run in registry order, each gated on the architecture as it stands after
 * the previous ones, so an arch-renaming handler decides what runs after it.
 */
export function translateModel(model: GgufModel, opts: TranslateOptions = {}): TranslatedView | null {
  const profile = resolveProfile(opts.profile);
  if (!compatEnabled(opts.env)) return null;
  const handlers = opts.handlers ?? textHandlers;
  const t = new Translation(model, profile);
  const applied: { name: string; markers: string[] }[] = [];
  for (const h of handlers) {
    if (!gatesOn(h, t.arch)) continue;
    const markers = h.detect(t.draft);
    if (markers !== null && markers.length > 0) {
      t.handler = h.name;
      h.apply(t);
      applied.push({ name: h.name, markers });
      continue;
    }
    // A file the reference passes through may still carry a known gap: only the fixes run
    // (under `reference` they are listed as kept and nothing changes, so the result is null).
    const gaps = h.applyFixes !== undefined ? h.detectGaps?.(t.draft) : undefined;
    if (gaps === undefined || gaps === null || gaps.length === 0) continue;
    t.handler = h.name;
    h.applyFixes!(t);
    applied.push({ name: h.name, markers: gaps });
  }
  t.handler = undefined;
  if (applied.length === 0) return null;
  const { hidden, dropped, ops, fixes, gapsKept } = t.finish();
  const report = buildReport({ source: model, output: t.draft, origins: t.origins, handlers: applied, hidden, dropped, ops, profile, fixes, gapsKept });
  // A handler may recognize a file that is already translated; then there is nothing to do.
  if (changesNothing(report)) return null;
  return new TranslatedView(t.draft, report, model);
}

/** Parses the header of a file, buffer, Blob or source and translates it (see translateModel). */
export async function translate(
  input: string | Uint8Array | ArrayBuffer | Blob | ByteSource | GgufModel,
  opts: TranslateOptions = {},
): Promise<TranslatedView | null> {
  resolveProfile(opts.profile);
  if (!compatEnabled(opts.env)) return null;
  if (isModel(input)) return translateModel(input, opts);
  const model = await readGguf(input);
  let view: TranslatedView | null = null;
  try {
    view = translateModel(model, opts);
  } finally {
    // The view reads tensor bytes from the file until view.close(); nothing else keeps it open.
    if (view === null) await model.close();
  }
  return view;
}

/** Which handlers would run on this model, with their markers (empty: nothing to do). */
export function detectHandlers(model: GgufModel, opts: TranslateOptions = {}): Array<{ name: string; markers: readonly string[] }> {
  return translateModel(model, opts)?.report.handlers.map((h) => ({ name: h.name, markers: h.markers })) ?? [];
}

function isModel(x: unknown): x is GgufModel {
  return typeof x === "object" && x !== null && "tensors" in x && "kvs" in x && typeof (x as GgufModel).kvs === "function";
}
