/**
 * Child-process entry for runLoaderInSubprocess:
 *   node --import tsx loader-child.ts '<json {path, options}>'
 * Prints one line "<marker><json LoadResult>" on stdout. llama.cpp warnings and
 * errors are also copied to stderr synchronously so that, if llama.cpp aborts,
 * the parent still sees why.
 */
import { writeSync } from "node:fs";
import { LlamaLogLevel } from "node-llama-cpp";
import { loadAndGenerate, type LoadAndGenerateOptions } from "./load-and-generate";
import { setLlamaLogEcho } from "./shared-llama";

import { LOADER_RESULT_MARKER } from "./loader-protocol";

const echoLevels = new Set<string>([LlamaLogLevel.error, LlamaLogLevel.fatal, LlamaLogLevel.warn]);

async function main(): Promise<void> {
  const { path, options } = JSON.parse(process.argv[2] ?? "{}") as { path: string; options?: LoadAndGenerateOptions };
  setLlamaLogEcho((line) => {
    if (echoLevels.has(line.level)) writeSync(2, `${line.message}\n`);
  });
  const result = await loadAndGenerate(path, options);
  writeSync(1, `${LOADER_RESULT_MARKER}${JSON.stringify(result)}\n`);
  // The native addon can keep the event loop alive; the answer is out, so leave.
  process.exit(0);
}

if (process.argv[1] && /loader-child\.[cm]?[jt]s$/.test(process.argv[1])) {
  main().catch((error: unknown) => {
    writeSync(2, `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
