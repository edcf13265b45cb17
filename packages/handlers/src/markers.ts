import type { GgufModel } from "@compat/gguf";

/** What a detector returns is built from these: the Ollama markers that hold, or null. */

/** "kv <key>" for each of `keys` the file has, in order (spread into anyOf). */
export function kvMarkers(m: GgufModel, keys: readonly string[]): string[] {
  return keys.filter((k) => m.has(k)).map((k) => `kv ${k}`);
}

/** The markers that hold (each given as `condition && "description"`), or null if none. */
export function anyOf(...checks: Array<string | false | undefined | null>): string[] | null {
  const found = checks.filter((c): c is string => typeof c === "string");
  return found.length > 0 ? found : null;
}
