import { existsSync } from "node:fs";
import { ModelStore } from "@compat/server-bridge";
import type { CliIo } from "../io";

/** A FILE argument: the file when it exists, else an Ollama model reference resolved in the store (its model blob). */
export async function resolveInput(ref: string, io: CliIo): Promise<string> {
  if (existsSync(ref)) return ref;
  return (await new ModelStore(undefined, io.env).resolve(ref)).modelPath;
}
