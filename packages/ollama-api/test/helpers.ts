import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";

/** A fresh temp dir per call, all removed after the file's tests. */
export function tempDirs(): () => Promise<string> {
  const made: string[] = [];
  afterAll(async () => {
    for (const d of made) await rm(d, { recursive: true, force: true });
  });
  return async () => {
    const d = await mkdtemp(join(tmpdir(), "compat-bridge-"));
    made.push(d);
    return d;
  };
}

import { findLlamaTools } from "@compat/testkit";

/** llama-server from the shared tools build ($LLAMA_BIN, else scripts/build-llama-tools.sh). */
export async function llamaServerPath(): Promise<string> {
  return (await findLlamaTools()).server;
}

/** Options every test launch uses: small context, 2 threads, no warmup. */
export const SMALL = ["--threads", "2", "--no-warmup"];
