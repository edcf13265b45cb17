export { BridgeError, type BridgeErrorCode } from "./errors";
export { parseModelName, displayName, fullName, DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, type ModelName } from "./name";
export { MediaType } from "./media-types";
export { ModelStore, defaultModelsDir, parseManifest, type Manifest, type ManifestLayer, type ResolvedModel } from "./store";
export { TranslationCache, defaultCacheDir, TRANSLATOR_VERSION, type CacheEntry, type CacheKind, type CacheOptions, type ObtainOptions } from "./cache";
export { projectorFor, loadClipView, type ProjectorSource } from "./projector";
export { prepareModel, type PrepareOptions, type PreparedModel } from "./prepare";
export { modelArgs, DEFAULT_NUM_CTX } from "./args";
export { builtinTemplateFor } from "./template";
