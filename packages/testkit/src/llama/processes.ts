import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * Remembers a child so it dies with us: on normal exit of this process, and
 * whenever a test calls killAllSpawned(). Timeouts are per call (see runProcess).
 */
export function track(child: ChildProcess): ChildProcess {
  live.add(child);
  child.once("exit", () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", killAllSpawned);
  }
  return child;
}

/** SIGKILLs every still-running child this module started. */
export function killAllSpawned(): void {
  for (const child of live) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
  live.clear();
}

export interface ProcessResult {
  /** Exit code 0 and not timed out. */
  ok: boolean;
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
}

export interface RunProcessOptions {
  /** Kill (SIGKILL) after this many ms. Default 120 000. */
  timeoutMs?: number;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Keep at most this many chars of each stream (the tail). Default 1 MiB. */
  maxOutput?: number;
}

/** Runs a command to completion with a hard timeout; never rejects for a non-zero exit. */
export function runProcess(command: string, args: readonly string[], options: RunProcessOptions = {}): Promise<ProcessResult> {
  const { timeoutMs = 120_000, maxOutput = 1 << 20 } = options;
  return new Promise((resolve, reject) => {
    const spawnOptions: SpawnOptions = { cwd: options.cwd, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] };
    const child = track(spawn(command, args, spawnOptions));
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    const keepTail = (text: string) => (text.length > maxOutput ? text.slice(-maxOutput) : text);
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (stdout = keepTail(stdout + chunk)));
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr = keepTail(stderr + chunk)));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ ok: code === 0 && !timedOut, code, signal, timedOut, stdout, stderr });
    });
  });
}

/** The last `lines` non-empty lines of a stream, for error messages. */
export function tail(text: string, lines = 20): string {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .slice(-lines)
    .join("\n");
}
