export { PrepareError, type PrepareErrorCode } from "./errors";
export { TranslationCache, defaultCacheDir, TRANSLATOR_VERSION, type CacheEntry, type CacheKind, type CacheOptions, type ObtainOptions } from "./cache";
export { prepareModel, modelFacts, type PrepareOptions, type PreparedModel } from "./prepare";
export { StoreMount, serveMount, defaultSidecarDir, type StoreMountOptions, type MountedModel, type ServeMount } from "./store-mount";
export { modelFiles, fileStem, MODELS_LAYOUTS, type ModelsLayout } from "./layout";
