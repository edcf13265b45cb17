import { GgufValueType, type GgufModel } from "@compat/gguf";

/** Small, typed reads the detectors share. They never throw on odd types: a key with
 * the wrong type simply does not count as a marker, as in the reference. */

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

/** The items of a UINT32 array, or the non-negative ones of an INT32 array; undefined otherwise. */
export function u32ArrayKv(m: GgufModel, key: string): number[] | undefined {
  const arr = m.tryGetArray(key);
  if (arr?.itemType === GgufValueType.UINT32) return arr.toArray() as number[];
  if (arr?.itemType === GgufValueType.INT32) return (arr.toArray() as number[]).filter((v) => v >= 0);
  return undefined;
}

/** The items of a STRING array, or undefined (missing or another type). */
export function stringArrayKv(m: GgufModel, key: string): string[] | undefined {
  return m.tryGetArray(key, GgufValueType.STRING)?.toArray() as string[] | undefined;
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

/** "kv <key>" for each of `keys` the file has, in order (spread into anyOf). */
export function kvMarkers(m: GgufModel, keys: readonly string[]): string[] {
  return keys.filter((k) => m.has(k)).map((k) => `kv ${k}`);
}

/** The markers that hold (each given as `condition && "description"`), or null if none. */
export function anyOf(...checks: Array<string | false | undefined | null>): string[] | null {
  const found = checks.filter((c): c is string => typeof c === "string");
  return found.length > 0 ? found : null;
}

/**
 * The items of an integer array KV (any 8/16/32/64-bit item type) as numbers, or
 * undefined when the key is missing or not an integer array. 32-bit items keep
 * their bits as i32, as the reference reads them through an int32_t pointer.
 */
export function intArrayKv(m: GgufModel, key: string): number[] | undefined {
  const kv = m.get(key);
  if (kv?.type !== GgufValueType.ARRAY) return undefined;
  const arr = m.getArray(key);
  const ints: GgufValueType[] = [
    GgufValueType.INT8, GgufValueType.UINT8, GgufValueType.INT16, GgufValueType.UINT16,
    GgufValueType.INT32, GgufValueType.UINT32, GgufValueType.INT64, GgufValueType.UINT64,
  ];
  if (!ints.includes(arr.itemType)) return undefined;
  return arr.toArray().map((v) => (typeof v === "bigint" ? Number(BigInt.asIntN(32, v)) : (v as number) | 0));
}

/**
 * Block numbers below `count` that have tensors (`<prefix>N.*`, default `blk.N.*`), ascending. A per-block loop
 * goes over these rather than 0..count-1: on a file whose block count key says 2^31, the
 * loop is bounded by the tensors the file really has (the same blocks get visited, since
 * a block without tensors has nothing to translate).
 */
export function blocksWithTensors(m: GgufModel, count: number, prefix = "blk."): number[] {
  const seen = new Set<number>();
  for (const t of m.tensors) {
    if (!t.name.startsWith(prefix)) continue;
    const match = /^(\d+)\./.exec(t.name.slice(prefix.length));
    if (match === null) continue;
    const b = Number(match[1]);
    if (b < count) seen.add(b);
  }
  return [...seen].sort((a, b) => a - b);
}
