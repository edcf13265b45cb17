export { loadAndGenerate, logitDistance, type LoadAndGenerateOptions, type LoadResult, type StepProbabilities } from "./load-and-generate";
export { runLoaderInSubprocess, type SubprocessLoaderOptions, type SubprocessLoadResult } from "./run-loader-subprocess";
export { killAllSpawned, runProcess, type ProcessResult, type RunProcessOptions } from "./processes";
export { CPU_BASELINE, pinNodeLlamaCppCpuVariant } from "./cpu-baseline";
export { loadedCpuBackend } from "./shared-llama";
export { TestkitError, LlamaHarnessError, type TestkitErrorCode, type LlamaHarnessErrorCode } from "./errors";
export { findLlamaTools, llamaCppSourceDir, runLlamaQuantize, runMtmdCli, type LlamaTools, type MtmdCliOptions, type ToolRunOptions } from "./tools";
export {
  freePort,
  PRINTABLE_ASCII_GRAMMAR,
  serverCompletion,
  startLlamaServer,
  type CompletionOptions,
  type CompletionResult,
  type LlamaServer,
  type StartLlamaServerOptions,
} from "./server";
