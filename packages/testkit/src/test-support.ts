import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findLlamaTools } from "./llama/index";

/**
 * Fresh temp folders for one test file: each call of the returned function makes one, and all
 * are removed by the cleanup handed to `onDone` (vitest's `afterAll`; this package does not
 * import the test runner).
 */
export function tempDirs(onDone: (cleanup: () => Promise<void>) => void, prefix = "compat-bridge-"): () => Promise<string> {
  const made: string[] = [];
  onDone(async () => {
    for (const d of made) await rm(d, { recursive: true, force: true });
  });
  return async () => {
    const d = await mkdtemp(join(tmpdir(), prefix));
    made.push(d);
    return d;
  };
}

/** llama-server from the shared tools build ($LLAMA_BIN, else scripts/build-llama-tools.sh). */
export async function llamaServerPath(): Promise<string> {
  return (await findLlamaTools()).server;
}

/** llama-server arguments every test launch uses: 2 threads, no warmup. */
export const SMALL_SERVER_ARGS = ["--threads", "2", "--no-warmup"];

/**
 * Polls `probe` (every 20 ms) until it gives a value other than undefined or false, and returns
 * it; fails naming `what` after `ms`. For a state a test waits for, never a fixed sleep.
 */
export async function until<T>(what: string, probe: () => T | undefined | false | Promise<T | undefined | false>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Whether process `pid` exists (a zombie not yet reaped counts). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ESRCH") return false;
    throw e;
  }
}
