/** What the cli tests share: the binary from source (run through tsx), and a child process's output and exit. */
import type { ChildProcess } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

/** src/bin.ts, run as `node --import <tsx> <bin> …`. */
export const bin = fileURLToPath(new URL("../src/bin.ts", import.meta.url));
export const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Everything the child writes to stdout and stderr, and its exit code, once it has closed. */
export function runToEnd(child: ChildProcess): Promise<Run> {
  return new Promise((resolve, reject) => {
    const stdout = collect(child.stdout);
    const stderr = collect(child.stderr);
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout: stdout(), stderr: stderr() }));
  });
}

/** The text a stream has given so far. */
export function collect(s: NodeJS.ReadableStream | null): () => string {
  let text = "";
  s?.on("data", (d) => (text += d));
  return () => text;
}

/** How the child ended. */
export function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((r) => child.on("close", (code, signal) => r({ code, signal })));
}
