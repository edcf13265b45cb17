import { existsSync } from "node:fs";
import { join } from "node:path";
import { TestkitError } from "./errors";
import { repoRoot } from "./package-root";
import { runProcess, tail, type ProcessResult } from "./processes";

export interface LlamaTools {
  binDir: string;
  server: string;
  mtmdCli: string;
  quantize: string;
  /**
   * scripts/llama-log-drain.c built by build-llama-tools.sh, preloaded into
   * every tool so a failing tool's last log lines (its error) are not lost.
   */
  logDrain?: string;
}

const toolNames = { server: "llama-server", mtmdCli: "llama-mtmd-cli", quantize: "llama-quantize" } as const;
let toolsPromise: Promise<LlamaTools> | undefined;

function toolsIn(binDir: string): LlamaTools | undefined {
  const tools = {
    binDir,
    server: join(binDir, toolNames.server),
    mtmdCli: join(binDir, toolNames.mtmdCli),
    quantize: join(binDir, toolNames.quantize),
  };
  if (![tools.server, tools.mtmdCli, tools.quantize].every((p) => existsSync(p))) return undefined;
  const logDrain = join(binDir, "liblog-drain.so");
  return existsSync(logDrain) ? { ...tools, logDrain } : tools;
}

/**
 * Paths of llama-server, llama-mtmd-cli and llama-quantize: from $LLAMA_BIN
 * (set by .ci/run) or else from scripts/build-llama-tools.sh, which reuses its
 * cache keyed by the llama.cpp commit and only builds on a cold machine (slow:
 * many minutes on two cores). The answer is cached for the process.
 */
export function findLlamaTools(): Promise<LlamaTools> {
  toolsPromise ??= locateTools().catch((error: unknown) => {
    toolsPromise = undefined;
    throw error;
  });
  return toolsPromise;
}

async function locateTools(): Promise<LlamaTools> {
  const fromEnv = process.env.LLAMA_BIN;
  if (fromEnv) {
    const tools = toolsIn(fromEnv);
    if (tools) return tools;
    throw new TestkitError("TOOLS_UNAVAILABLE", `LLAMA_BIN=${fromEnv} lacks ${Object.values(toolNames).join(", ")}`);
  }
  const script = join(repoRoot(), "scripts", "build-llama-tools.sh");
  const run = await runProcess("bash", [script], { cwd: repoRoot(), timeoutMs: 90 * 60_000 });
  const binDir = run.stdout.trim().split("\n").pop() ?? "";
  const tools = run.ok && binDir ? toolsIn(binDir) : undefined;
  if (tools) return tools;
  throw new TestkitError("TOOLS_UNAVAILABLE", `build-llama-tools.sh failed (${run.code ?? run.signal}):\n${tail(run.stderr)}`);
}

/**
 * Environment for llama.cpp tools: no LLAMA_ARG_* overrides or HF tokens
 * leaking in from the caller, and the log-drain preload when we have it.
 */
export function toolEnv(tools: Pick<LlamaTools, "logDrain">): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key.startsWith("LLAMA_ARG_") || key === "HF_TOKEN" || key === "LLAMA_CACHE") continue;
    env[key] = value;
  }
  if (tools.logDrain) env.LD_PRELOAD = [tools.logDrain, env.LD_PRELOAD].filter(Boolean).join(":");
  return env;
}

export interface ToolRunOptions {
  /** Default 120 000 ms. */
  timeoutMs?: number;
  /** Extra command-line arguments, appended. */
  args?: string[];
  /** Extra environment variables for the tool (e.g. MTMD_DEBUG_EMBEDDINGS). */
  env?: Readonly<Record<string, string>>;
}

/** `llama-quantize input output type` (e.g. "Q8_0"); ok when it exits 0. */
export async function runLlamaQuantize(input: string, output: string, type: string, options: ToolRunOptions = {}): Promise<ProcessResult> {
  const tools = await findLlamaTools();
  return runProcess(tools.quantize, [...(options.args ?? []), input, output, type, "2"], {
    timeoutMs: options.timeoutMs,
    env: toolEnv(tools),
  });
}

export interface MtmdCliOptions extends ToolRunOptions {
  model: string;
  mmproj: string;
  /** An image (or audio) file to describe. */
  image: string;
  prompt: string;
  /** Tokens to generate. Default 4. */
  nPredict?: number;
}

/** One greedy, short llama-mtmd-cli run on CPU. */
export async function runMtmdCli(options: MtmdCliOptions): Promise<ProcessResult> {
  const tools = await findLlamaTools();
  const { model, mmproj, image, prompt, nPredict = 4 } = options;
  const args = [
    ...["-m", model, "--mmproj", mmproj, "--image", image, "-p", prompt],
    ...["-n", String(nPredict), "--temp", "0", "--seed", "0", "-c", "1024", "-t", "2", "--no-warmup"],
    ...(options.args ?? []),
  ];
  return runProcess(tools.mtmdCli, args, { timeoutMs: options.timeoutMs, env: { ...toolEnv(tools), ...options.env } });
}

/**
 * The llama.cpp source tree our tools were built from (gguf-py, models/ vocab files):
 * LLAMA_CPP_SRC if set, else the checkout build-llama-tools.sh keeps next to the bin
 * directory in its cache. Undefined when neither exists.
 */
export async function llamaCppSourceDir(): Promise<string | undefined> {
  const fromEnv = process.env.LLAMA_CPP_SRC;
  if (fromEnv !== undefined && existsSync(fromEnv)) return fromEnv;
  const { binDir } = await findLlamaTools();
  const src = join(binDir, "..", "src");
  return existsSync(join(src, "gguf-py")) ? src : undefined;
}
