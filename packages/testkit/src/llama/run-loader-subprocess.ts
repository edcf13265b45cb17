import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { LoadAndGenerateOptions, LoadResult } from "./load-and-generate";
import { LOADER_RESULT_MARKER } from "./loader-protocol";
import { testkitRoot } from "./package-root";
import { runProcess, tail } from "./processes";

export interface SubprocessLoaderOptions extends LoadAndGenerateOptions {
  /** Hard limit for the whole child (load + generate). Default 120 000 ms. */
  timeoutMs?: number;
}

export type SubprocessLoadResult = LoadResult & {
  /** Set when the child did not report a result: it crashed, was killed, or timed out. */
  crash?: { code: number | null; signal: string | null; timedOut: boolean };
};

/**
 * loadAndGenerate in a fresh node process. llama.cpp calls abort() on some
 * malformed files (failed GGML_ASSERTs), which would take the test worker down;
 * here a crash becomes { ok: false, error: <stderr tail>, crash }.
 */
export async function runLoaderInSubprocess(path: string, options: SubprocessLoaderOptions = {}): Promise<SubprocessLoadResult> {
  const { timeoutMs = 120_000, ...loaderOptions } = options;
  const child = join(testkitRoot(), "src", "llama", "loader-child.ts");
  const tsx = pathToFileURL(createRequire(join(testkitRoot(), "package.json")).resolve("tsx")).href;
  const run = await runProcess(process.execPath, ["--import", tsx, child, JSON.stringify({ path, options: loaderOptions })], {
    timeoutMs,
  });

  const line = run.stdout.split("\n").find((l) => l.startsWith(LOADER_RESULT_MARKER));
  if (line && run.code === 0) return JSON.parse(line.slice(LOADER_RESULT_MARKER.length)) as LoadResult;

  const why = run.timedOut ? `timed out after ${timeoutMs} ms` : `exited with ${run.signal ?? `code ${run.code}`}`;
  return {
    ok: false,
    error: tail(run.stderr) || `loader child ${why}`,
    crash: { code: run.code, signal: run.signal, timedOut: run.timedOut },
  };
}
