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
