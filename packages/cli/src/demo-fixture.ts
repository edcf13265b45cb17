/**
 * The demo's model: dist/demo-model.gguf, written by the build (scripts/demo-model.ts) from
 * @compat/testkit's gemma3 "4b-vision" fixture and shipped in this package's tarball, so
 * `ollama-compat demo` needs neither the unpublished testkit nor a network.
 */
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeFileAtomic } from "@compat/files";
import { CliError } from "./errors";

/** The fixture the build writes: arch, variant, layout and seed of @compat/testkit's generator. */
export const DEMO_FIXTURE = { arch: "gemma3", variant: "4b-vision", layout: "ollama", seed: 1 } as const;

/** dist/demo-model.gguf of this package, from src/ (run from source) as from dist/ (built). */
export function demoModelPath(): string {
  // import.meta.url also works in the CommonJS builds (tsup's shims, tsup.config.ts)
  return join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "demo-model.gguf");
}

/** Writes the demo model to `path` (atomically, as every output). */
export async function writeDemoModel(path: string): Promise<void> {
  const model = await readFile(demoModelPath()).catch((cause: NodeJS.ErrnoException) => {
    if (cause.code !== "ENOENT") throw cause;
    throw new CliError("error", `demo: ${demoModelPath()} is missing; the build writes it (npm run build)`);
  });
  await writeFileAtomic(path, model);
}
