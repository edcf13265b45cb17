export * from "./fixtures/index";
export * from "./llama/index";
export { fileDigest, guardSource, SourceModifiedError, type SourceGuard } from "./integrity";
