import { basename } from "node:path";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { pinNodeLlamaCppCpuVariant } from "./cpu-baseline";
import { TestkitError } from "./errors";

/** One captured llama.cpp log line. */
export interface LlamaLogLine {
  level: LlamaLogLevel;
  message: string;
}

let llamaPromise: Promise<Llama> | undefined;
let sink: LlamaLogLine[] | undefined;
let queue: Promise<unknown> = Promise.resolve();
let echo: ((line: LlamaLogLine) => void) | undefined;
let cpuBackend: string | undefined;

/**
 * Also hand every log line to `fn` as it arrives (the loader child uses this to
 * copy errors to stderr synchronously, so they survive an abort()).
 */
export function setLlamaLogEcho(fn: ((line: LlamaLogLine) => void) | undefined): void {
  echo = fn;
}

/**
 * The process-wide prebuilt llama.cpp (CPU only, never built from source), on the
 * CPU variant of the suite's baseline (see CPU_BASELINE), checked from ggml's own log.
 * Loading the native addon is slow-ish and its logger can only be set once, so
 * we create it once and route its log lines to whichever job is running.
 */
export function sharedLlama(): Promise<Llama> {
  llamaPromise ??= startLlama().catch((error: unknown) => {
    // a wrong CPU variant stays wrong: loading again would not change it (and the logger is set once)
    if (!(error instanceof TestkitError && error.code === "CPU_VARIANT_NOT_PINNED")) llamaPromise = undefined;
    throw error;
  });
  return llamaPromise;
}

async function startLlama(): Promise<Llama> {
  const pinned = pinNodeLlamaCppCpuVariant();
  const llama = await getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    progressLogs: false,
    logLevel: LlamaLogLevel.debug,
    logger: (level, message) => {
      const line = { level, message: message.replace(/\n+$/, "") };
      cpuBackend ??= /loaded CPU backend from (.+)$/.exec(line.message)?.[1];
      sink?.push(line);
      echo?.(line);
    },
  });
  // node-llama-cpp hands log lines over in a later microtask: give the backend's line time to arrive
  for (let i = 0; i < 100 && cpuBackend === undefined; i++) await new Promise((r) => setTimeout(r, 10));
  if (pinned && (cpuBackend === undefined || basename(cpuBackend) !== basename(pinned))) {
    throw new TestkitError("CPU_VARIANT_NOT_PINNED", `node-llama-cpp loaded ${cpuBackend ?? "no CPU backend it logged"}, not the pinned ${pinned}`);
  }
  return llama;
}

/** The CPU backend library ggml loaded for sharedLlama(), as its log named it. */
export async function loadedCpuBackend(): Promise<string | undefined> {
  await sharedLlama();
  return cpuBackend;
}

/**
 * Runs `job` alone with a fresh log capture. Jobs are serialised because the
 * logger is process-wide: two concurrent loads would interleave their logs.
 */
export function withLlamaLogs<T>(job: (llama: Llama, logs: LlamaLogLine[]) => Promise<T>): Promise<T> {
  const run = async (): Promise<T> => {
    const llama = await sharedLlama();
    const logs: LlamaLogLine[] = [];
    sink = logs;
    try {
      return await job(llama, logs);
    } finally {
      // llama.cpp logs arrive through a native callback; give stragglers a tick.
      await new Promise((resolve) => setTimeout(resolve, 10));
      if (sink === logs) sink = undefined;
    }
  };
  const result = queue.then(run, run);
  queue = result.catch(() => undefined);
  return result;
}

/**
 * The llama.cpp lines that explain a failure: error/fatal lines, deduplicated
 * (node-llama-cpp loads twice when it first simulates memory use, so the same
 * error is logged twice), in order.
 */
export function llamaErrorText(logs: readonly LlamaLogLine[], fallback: string): string {
  const seen = new Set<string>();
  const lines: string[] = [];
  for (const { level, message } of logs) {
    if (level !== LlamaLogLevel.error && level !== LlamaLogLevel.fatal) continue;
    if (seen.has(message)) continue;
    seen.add(message);
    lines.push(message);
  }
  return lines.length > 0 ? lines.join("\n") : fallback;
}
