export { StoreError, type StoreErrorCode } from "./errors";
export { parseModelName, displayName, fullName, DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, type ModelName } from "./name";
export { MediaType } from "./media-types";
export { ModelStore, defaultModelsDir, isPathLike, parseManifest, type Manifest, type ManifestLayer, type ResolvedModel, type StoreOptions } from "./store";
export { buildOllamaStore, type BuiltModel, type StoreLayer, type StoreModelSpec } from "./store-writer";
