import { GgufKeys, type ByteSource, type GgufModel } from "@compat/gguf";
import { gatesOn, translate, translateModel, type TranslatedView, type TranslateOptions, type TranslationProfile } from "@compat/handlers";
import { clipHandlers } from "./registry";

export interface ClipViewOptions {
  /** Environment to read OLLAMA_LLAMA_CPP_COMPAT from (default process.env). */
  env?: Record<string, string | undefined>;
  /** `native` (default) also applies the clip handlers' named fixes; `reference` reproduces Ollama's compat layer exactly. */
  profile?: TranslationProfile;
}

/**
 * The mmproj llama.cpp's clip loader needs, as a lazy view of an Ollama file: for a
 * monolithic vision model, `general.architecture = clip`, the clip.* keys and only the
 * tower and projector tensors under clip.cpp's names; for an old separate LLaVA
 * projector, the same file with its projector type named. Null when there is nothing
 * to translate: non-Ollama files, text-only models, files that already are native
 * mmprojs, and always when OLLAMA_LLAMA_CPP_COMPAT=0.
 * The same model may also be given to the text side (translateModel): each view works
 * on its own copy of the metadata.
 */
export function clipViewModel(model: GgufModel, opts: ClipViewOptions = {}): TranslatedView | null {
  return translateModel(model, clipOptions(opts));
}

/**
 * clipViewModel for a file path, buffer, Blob or byte source (header read only). The
 * view reads tensor bytes from the source until `view.close()`; when the result is null
 * the file is already closed.
 */
export async function clipView(
  input: string | Uint8Array | ArrayBuffer | Blob | ByteSource | GgufModel,
  opts: ClipViewOptions = {},
): Promise<TranslatedView | null> {
  return translate(input, clipOptions(opts));
}

/** The handlers' translation with the clip registry. */
function clipOptions(opts: ClipViewOptions): TranslateOptions {
  return {
    handlers: clipHandlers,
    ...(opts.env !== undefined ? { env: opts.env } : {}),
    ...(opts.profile !== undefined ? { profile: opts.profile } : {}),
  };
}

/**
 * The architectures whose Ollama files can carry a vision/audio tower we serve as an
 * mmproj, straight from the registry (for launchers deciding whether to look for one).
 * `clip` itself is not listed: it is the separate-projector case, not a model.
 */
export const clipArchitectures: ReadonlySet<string> = new Set(
  clipHandlers.flatMap((h) => (typeof h.arch === "string" ? [h.arch] : [...h.arch])).filter((a) => a !== "clip"),
);

/**
 * Whether a clip handler claims this model (its architecture has one and the detector
 * fires): exactly when clipViewModel would return a view, unless compat is disabled or
 * the file is already translated. Cheap: no copy of the metadata is made.
 */
export function hasClipHandler(model: GgufModel): boolean {
  const arch = model.getString(GgufKeys.ARCHITECTURE, "");
  return clipHandlers.some((h) => gatesOn(h, arch) && (h.detect(model)?.length ?? 0) > 0);
}
