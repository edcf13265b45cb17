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
