export * from "./fixtures/index";
export * from "./llama/index";
export * from "./store/ollama-store";
export { fileDigest, guardSource, SourceModifiedError, type SourceGuard } from "./integrity";
