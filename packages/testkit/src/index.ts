export * from "./fixtures/index";
export * from "./llama/index";
export * from "./store/ollama-store";
export * from "./fuzz/index";
export { fileDigest, guardSource, SourceModifiedError, type SourceGuard } from "./integrity";
