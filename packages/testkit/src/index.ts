export * from "./fixtures/index";
export * from "./llama/index";
