export { PrepareError, type PrepareErrorCode } from "./errors";
export type { ModelPreparer, PreparedModel } from "./preparer";
export { modelFacts } from "./preparer";
export { TranslationCache, defaultCacheDir, TRANSLATOR_VERSION, type CacheEntry, type CacheKind, type CacheOptions, type ObtainOptions } from "./cache";
export { prepareModel, cachePreparer, type PrepareOptions } from "./prepare";
export { StoreMount, defaultSidecarDir, defaultFactsDir, type StoreMountOptions, type MountedModel } from "./store-mount";
export { FactsRecords, type RecordedFacts } from "./model-facts";
export { ServeMount, type ServeMountOptions } from "./serve-mount";
export { modelFiles, fileStem, MODELS_LAYOUTS, type ModelsLayout } from "./layout";
