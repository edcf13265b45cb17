import { GgufValueType, type GgufModel } from "@compat/gguf";

/** Small, typed reads the detectors share. They never throw on odd types: a key with
 * the wrong type simply does not count as a marker, as in the reference. */

export function archIs(m: GgufModel, arch: string): boolean {
  return stringKv(m, "general.architecture") === arch;
}

/** The value of a STRING key, or undefined (missing or another type). */
export function stringKv(m: GgufModel, key: string): string | undefined {
  const kv = m.get(key);
  return kv?.type === GgufValueType.STRING ? (kv.value as string) : undefined;
}

/** A UINT32 key, or a non-negative INT32 one; undefined otherwise. */
export function u32Kv(m: GgufModel, key: string): number | undefined {
  const kv = m.get(key);
  if (kv?.type === GgufValueType.UINT32) return kv.value as number;
  if (kv?.type === GgufValueType.INT32 && (kv.value as number) >= 0) return kv.value as number;
  return undefined;
}

/** Missing, "" or "default" (a non-string value is not "default"). */
export function missingOrDefault(m: GgufModel, key: string): boolean {
  const kv = m.get(key);
  if (kv === undefined) return true;
  if (kv.type !== GgufValueType.STRING) return false;
  return kv.value === "" || kv.value === "default";
}

/** The token text at index i of tokenizer.ggml.tokens, if that is a string array. */
export function tokenAt(m: GgufModel, i: number): string | undefined {
  const kv = m.get("tokenizer.ggml.tokens");
  if (kv?.type !== GgufValueType.ARRAY) return undefined;
  const arr = m.getArray("tokenizer.ggml.tokens");
  if (arr.itemType !== GgufValueType.STRING || i >= arr.length) return undefined;
  return arr.at(i) as string;
}

export function hasTensorPrefix(m: GgufModel, prefix: string): boolean {
  return m.tensors.some((t) => t.name.startsWith(prefix));
}

export function hasTensorSuffix(m: GgufModel, suffix: string): boolean {
  return m.tensors.some((t) => t.name.endsWith(suffix));
}

/** The markers that hold (each given as `condition && "description"`), or null if none. */
export function anyOf(...checks: Array<string | false | undefined | null>): string[] | null {
  const found = checks.filter((c): c is string => typeof c === "string");
  return found.length > 0 ? found : null;
}

/**
 * Block numbers below `count` that have tensors (`blk.N.*`), ascending. A per-block loop
 * goes over these rather than 0..count-1: on a file whose block count key says 2^31, the
 * loop is bounded by the tensors the file really has (the same blocks get visited, since
 * a block without tensors has nothing to translate).
 */
export function blocksWithTensors(m: GgufModel, count: number): number[] {
  const seen = new Set<number>();
  for (const t of m.tensors) {
    const match = /^blk\.(\d+)\./.exec(t.name);
    if (match === null) continue;
    const b = Number(match[1]);
    if (b < count) seen.add(b);
  }
  return [...seen].sort((a, b) => a - b);
}
