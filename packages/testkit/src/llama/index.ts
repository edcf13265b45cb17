export { loadAndGenerate, type LoadAndGenerateOptions, type LoadResult } from "./load-and-generate";
export { runLoaderInSubprocess, type SubprocessLoaderOptions, type SubprocessLoadResult } from "./run-loader-subprocess";
export { killAllSpawned, runProcess, type ProcessResult, type RunProcessOptions } from "./processes";
