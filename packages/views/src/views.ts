import { GgufModel, readGguf, type ByteSource } from "@compat/gguf";
import { compatEnabled, gatesOn, resolveProfile, textHandlers, translateModel, type TranslatedView, type TranslationProfile } from "@compat/handlers";
import { clipView, clipViewModel } from "@compat/clip";
import { largeBytes, nativeStringWalk } from "@compat/tensor-ops";
import { LLAMA_CPP_ARCHS } from "./llama-archs";
import { ollamaWriterMarkers } from "./writer-traces";

/**
 * What llama.cpp gets from a file, in one word. `native`: it loads the file as it is.
 * `supported`: an Ollama file this version translates (a text view, an mmproj view, or both).
 * `not-supported`: written by Ollama, of an architecture that neither a handler of this version
 * nor stock llama.cpp knows. `disabled`: OLLAMA_LLAMA_CPP_COMPAT=0 turns translation off.
 *
 * An Ollama-written file of an architecture llama.cpp knows and no handler gates on is native:
 * the reference's compat layer has no handler for it either, so Ollama hands it to llama.cpp
 * unchanged.
 */
export type FileStatus = "native" | "supported" | "not-supported" | "disabled";

export interface ViewsOptions {
  /** Environment to read OLLAMA_LLAMA_CPP_COMPAT from (default process.env). */
  env?: Record<string, string | undefined>;
  /** `native` (default) or `reference`, for both views. */
  profile?: TranslationProfile;
  /**
   * The model's separate projector files (an Ollama manifest's projector layers, first one
   * used): one takes the place of an embedded tower (see projectorOf).
   */
  projectors?: readonly string[];
}

/** The projector llama.cpp gets with `--mmproj`. */
export type Mmproj =
  /** A lazy mmproj: the clip view of `path` (the file's own tower, or a projector file that needs translating). */
  | { readonly kind: "view"; readonly view: TranslatedView; readonly path: string | undefined }
  /** A projector file llama.cpp loads as it is. */
  | { readonly kind: "file"; readonly path: string };

/**
 * A file as llama.cpp gets it. Close it when done: it owns the parsed model and both views,
 * which read from that one model (so close the ModelViews, not a view alone).
 */
export interface ModelViews {
  readonly status: FileStatus;
  /** `general.architecture` of the file ("unknown" when it has none). */
  readonly architecture: string;
  /** The parsed file (header only). */
  readonly model: GgufModel;
  /** The text GGUF llama.cpp must load instead of the file, or null: it loads the file as it is. */
  readonly text: TranslatedView | null;
  /** What llama.cpp gets with `--mmproj`, or null: no projector. */
  readonly mmproj: Mmproj | null;
  /** Traces of Ollama's GGUF writer (docs/reference/ollama-writer.md), or null: not written by Ollama. */
  readonly ollamaWriter: readonly string[] | null;
  /** Closes both views and the files they read. */
  close(): Promise<void>;
}

/**
 * The one answer to "what does llama.cpp get from this file, and is it supported?": the file's
 * status and both lazy views, for every command and launcher. Reads the header only (a path,
 * buffer, Blob, byte source or parsed model); the views read tensor bytes on demand. Non-Ollama
 * files are a no-op: status `native`, no views.
 */
export async function openViews(input: string | Uint8Array | ArrayBuffer | Blob | ByteSource | GgufModel, opts: ViewsOptions = {}): Promise<ModelViews> {
  // a vocabulary's megabytes of header in huge pages where the addon gives them (largeBytes),
  // walked by the addon's compiled loop where it has one
  const walkStrings = input instanceof GgufModel ? undefined : nativeStringWalk();
  const model = input instanceof GgufModel ? input : await readGguf(input, { allocate: largeBytes, ...(walkStrings !== undefined ? { walkStrings } : {}) });
  let layer: Mmproj | undefined;
  try {
    const projector = opts.projectors?.[0];
    if (projector !== undefined) layer = await projectorOf(projector, opts);
    return viewsOf(model, opts, layer, typeof input === "string" ? input : undefined);
  } catch (e) {
    if (layer?.kind === "view") await layer.view.close();
    await model.close();
    throw e;
  }
}

/**
 * A separate projector file as llama.cpp gets it: its clip view when it needs translating (old
 * LLaVA projectors have no projector type), else the file as it is (also with compat disabled).
 */
export async function projectorOf(path: string, opts: Pick<ViewsOptions, "env" | "profile"> = {}): Promise<Mmproj> {
  const view = await clipView(path, pick(opts));
  return view !== null ? { kind: "view", view, path } : { kind: "file", path };
}

/** Both views of a parsed model; `layer`, when given, is the projector instead of an embedded tower. */
function viewsOf(model: GgufModel, opts: ViewsOptions, layer: Mmproj | undefined, path: string | undefined): ModelViews {
  const architecture = model.getString("general.architecture", "unknown");
  const ollamaWriter = ollamaWriterMarkers(model);
  const result = (status: FileStatus, text: TranslatedView | null, mmproj: Mmproj | null): ModelViews => ({
    status,
    architecture,
    model,
    text,
    mmproj,
    ollamaWriter,
    async close() {
      await text?.close();
      if (mmproj?.kind === "view") await mmproj.view.close();
      await model.close();
    },
  });
  if (!compatEnabled(opts.env)) {
    resolveProfile(opts.profile);
    return result("disabled", null, layer ?? null);
  }
  const text = translateModel(model, pick(opts));
  const tower = layer === undefined ? clipViewModel(model, pick(opts)) : null;
  const mmproj: Mmproj | null = layer ?? (tower !== null ? { kind: "view", view: tower, path } : null);
  if (text !== null || mmproj?.kind === "view") return result("supported", text, mmproj);
  const unknownToAll = ollamaWriter !== null && !textHandlers.some((h) => gatesOn(h, architecture)) && !LLAMA_CPP_ARCHS.has(architecture);
  return result(unknownToAll ? "not-supported" : "native", null, mmproj);
}

function pick(opts: ViewsOptions): { env?: Record<string, string | undefined>; profile?: TranslationProfile } {
  return { ...(opts.env !== undefined ? { env: opts.env } : {}), ...(opts.profile !== undefined ? { profile: opts.profile } : {}) };
}
