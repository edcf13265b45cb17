import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { existsSync } from "node:fs";

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

/**
 * Ends every still-running child this module started: SIGTERM first (which
 * `timeout` passes on to the real command), SIGKILL shortly after.
 */
export function killAllSpawned(): void {
  const running = [...live].filter((child) => child.exitCode === null && child.signalCode === null);
  live.clear();
  for (const child of running) child.kill("SIGTERM");
  if (running.length === 0) return;
  const force = setTimeout(() => {
    for (const child of running) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }, 2_000);
  force.unref();
}

const coreutilsTimeout = ["/usr/bin/timeout", "/bin/timeout"].find((path) => existsSync(path));

/**
 * Spawns `command` under coreutils `timeout` (when present) so it dies after
 * `lifetimeMs` even if this process is killed before it can clean up; the
 * caller's own timer normally acts first. `timeout` forwards SIGTERM to the
 * command and re-raises the command's fatal signal, so exit codes and signals
 * (e.g. SIGABRT) read the same as without it. Tracked: see killAllSpawned.
 */
export function spawnWithLifetime(command: string, args: readonly string[], lifetimeMs: number, options: SpawnOptions): ChildProcess {
  if (!coreutilsTimeout) return track(spawn(command, args, options));
  const seconds = Math.ceil(lifetimeMs / 1000) + 5;
  return track(spawn(coreutilsTimeout, ["--kill-after=5", String(seconds), command, ...args], options));
}

/** SIGTERM (forwarded to the command by `timeout`), then SIGKILL if it lingers. */
export async function stopProcess(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const force = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(force);
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
  /** Stop it (SIGTERM, then SIGKILL) after this many ms. Default 120 000. */
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
    const child = spawnWithLifetime(command, args, timeoutMs, spawnOptions);
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    const keepTail = (text: string) => (text.length > maxOutput ? text.slice(-maxOutput) : text);
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (stdout = keepTail(stdout + chunk)));
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr = keepTail(stderr + chunk)));
    const timer = setTimeout(() => {
      timedOut = true;
      void stopProcess(child, 2_000);
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
