export { StoreError, type StoreErrorCode } from "./errors";
export { parseModelName, displayName, fullName, rollbackName, isRollbackName, rolledBackName, ROLLBACK_HOST_PREFIX, DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, type ModelName } from "./name";
export { MediaType } from "./media-types";
export { ModelStore, blobDigest, defaultModelsDir, isPathLike, parseManifest, type Manifest, type ManifestLayer, type ResolvedModel, type StoreOptions } from "./store";
export { buildOllamaStore, type BuiltModel, type StoreLayer, type StoreModelSpec } from "./store-writer";
export { migrateStore, planMigration, undoMigration, pruneMigration, PRUNE_GRACE_MS, type MigrateOptions, type MigratedPair, type MigrationPlan, type MigrateResult, type PlannedModel, type PlannedChange, type UndoResult, type PruneResult } from "./migrate";
export { addBlob, addBlobBytes, writeManifest, removeManifest, sweepStaging, hashFile, STAGING_DIR, type WrittenBlob } from "./store-write";
