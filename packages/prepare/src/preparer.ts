import { archKey, GgufError, type GgufModel } from "@compat/gguf";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import type { ResolvedModel, StoreError } from "@compat/store";
import { openViews, projectorOf, type FileStatus, type Mmproj } from "@compat/views";

/**
 * How a model reaches llama-server. Two answers: the translation cache writes what needs
 * translating once and serves the files (cachePreparer, prepareModel); the store's FUSE mount
 * serves them translated from the blobs without a copy (StoreMount).
 */
export interface ModelPreparer {
  prepare(resolved: ResolvedModel): Promise<PreparedModel>;
  /** Resolves once llama-server can open the prepared files (a mount may plan a model on first use); absent: at once. */
  ready?(resolved: ResolvedModel): Promise<void>;
  /** Whether `path` is a file of a model whose ready() has not run yet (so it is not there yet: llama-server's router looks at projectors as it starts). */
  notYetPlanned?(path: string): boolean;
  /**
   * Resolves once every file handed out by prepare() is where it was said to be, or rejects with
   * why it cannot be (a mount still starting when prepare() answered, that then failed). A
   * caller may start llama-server before it settles, not report it ready. Absent: at once.
   */
  settled?(): Promise<void>;
  /** Every installed model, as ModelStore.list answers (a mount lists the store once for itself and the router); absent: the caller lists the store. */
  list?(): Promise<Array<{ name: string; model?: ResolvedModel; error?: StoreError }>>;
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

/** What llama-server gets from a model (@compat/views), with the facts its arguments depend on; close it when done. */
export interface ServedViews {
  status: FileStatus;
  text: TranslatedView | null;
  mmproj: Mmproj | null;
  facts: Pick<PreparedModel, "architecture" | "embedding" | "hasChatTemplate">;
  close(): Promise<void>;
}

/**
 * Opens what llama-server gets from a model. A model file with a string that is not UTF-8 is
 * the one thing our reader refuses that gguf.cpp may load (it keeps strings as raw bytes), and a
 * file we cannot read is not one we can recognise as Ollama's: it is served as it is, with
 * llama-server as the judge (`onStatus` says so). Its separate projector layer is still
 * opened; a tower embedded in the file is not looked for. Anything else our reader refuses,
 * llama.cpp refuses too, and the typed error says it better.
 */
export async function servedViews(
  resolved: ResolvedModel,
  env: Record<string, string | undefined>,
  profile: TranslationProfile,
  onStatus?: (line: string) => void,
): Promise<ServedViews> {
  try {
    const views = await openViews(resolved.modelPath, { env, profile, projectors: resolved.projectors });
    return { status: views.status, text: views.text, mmproj: views.mmproj, facts: modelFacts(views.model, views.text), close: () => views.close() };
  } catch (e) {
    if (!(e instanceof GgufError) || e.code !== "INVALID_UTF8") throw e;
    onStatus?.(`not translated: ${e.message}; llama-server reads ${resolved.name} as it is`);
  }
  const layer = resolved.projectors[0];
  const mmproj = layer !== undefined ? await projectorOf(layer, { env, profile }) : null;
  return {
    status: "native",
    text: null,
    mmproj,
    // hasChatTemplate: unknown, so the bridge does not override whatever template the file carries
    facts: { architecture: "", embedding: false, hasChatTemplate: true },
    close: async () => {
      if (mmproj?.kind === "view") await mmproj.view.close();
    },
  };
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

/** The one shape of a PreparedModel: the views' verdict and facts, with the files a preparer serves them as. */
export function preparedModel(
  resolved: ResolvedModel,
  views: ServedViews,
  files: { modelPath: string; translated: boolean; cacheHit: boolean; mmproj?: string | undefined },
): PreparedModel {
  return {
    resolved,
    modelPath: files.modelPath,
    translated: files.translated,
    cacheHit: files.cacheHit,
    ...(files.mmproj !== undefined ? { mmproj: files.mmproj } : {}),
    status: views.status,
    handlers: views.text?.report.handlers.map((h) => h.name) ?? [],
    ...views.facts,
  };
}
