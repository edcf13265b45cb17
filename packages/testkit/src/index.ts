export {};
export * from "./llama/index";
