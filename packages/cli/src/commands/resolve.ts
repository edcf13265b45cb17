import { existsSync } from "node:fs";
import type { CliIo } from "../io";

/** A FILE argument: the file when it exists, else an Ollama model reference resolved in the store (its model blob). */
export async function resolveInput(ref: string, io: CliIo): Promise<string> {
  if (existsSync(ref)) return ref;
  // the store code loads only for references, so `inspect FILE` stays light
  const { ModelStore } = await import("@compat/server-bridge");
  return (await new ModelStore(undefined, io.env).resolve(ref)).modelPath;
}
