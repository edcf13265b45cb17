export * from "./fixtures/index";
export * from "./llama/index";
export { fileDigest, guardSource, SourceModifiedError, type SourceGuard } from "./integrity";
export { startOciRegistry, type OciRegistry, type OciRegistryOptions, type PushedModel, type RegistryLayer, type RegistryModelSpec } from "./oci-registry";
export { tempDirs, llamaServerPath, SMALL_SERVER_ARGS, until, processExists } from "./test-support";
