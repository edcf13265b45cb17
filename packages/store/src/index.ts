export { StoreError, type StoreErrorCode } from "./errors";
export { parseModelName, displayName, fullName, DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, type ModelName } from "./name";
export { MediaType } from "./media-types";
export { ModelStore, defaultModelsDir, isPathLike, parseManifest, type Manifest, type ManifestLayer, type ResolvedModel, type StoreOptions } from "./store";
export { buildOllamaStore, type BuiltModel, type StoreLayer, type StoreModelSpec } from "./store-writer";
export { blobFileName, blobPathIn, manifestPathIn, fileSha256, installBlob, writeBlobBytes, writeManifest, copyModel, deleteModel, removeUnreferenced, manifestDigests } from "./store-write";
export { RegistryClient, RegistryError, parseChallenge, type RegistryErrorCode, type RegistryOptions } from "./registry";
export { pullModel, type PullOptions, type PullProgress, type PulledModel } from "./pull";
