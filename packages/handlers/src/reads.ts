import { GgufValueType, type GgufArray, type GgufModel } from "@compat/gguf";

/**
 * Lenient reads of a model, the one vocabulary detectors and apply steps share (an apply step
 * reads `t.draft`): a key's value as the reference reads it, or undefined where the key is
 * missing or of another type, never a throw. An odd type in an Ollama file is a reason to
 * leave the key alone (or not to count it as a marker), as in the reference. GgufModel's own
 * getString, getU32, … are the strict reads: they throw.
 */

/** The value of a STRING key, or undefined (missing or another type). */
export function stringKv(m: GgufModel, key: string): string | undefined {
  const kv = m.get(key);
  return kv?.type === GgufValueType.STRING ? (kv.value as string) : undefined;
}

/** The value of a BOOL key, or undefined (missing or another type). */
export function boolKv(m: GgufModel, key: string): boolean | undefined {
  const kv = m.get(key);
  return kv?.type === GgufValueType.BOOL ? (kv.value as boolean) : undefined;
}

/** A UINT32 key, or a non-negative INT32 one; undefined otherwise. */
export function u32Kv(m: GgufModel, key: string): number | undefined {
  const kv = m.get(key);
  if (kv?.type === GgufValueType.UINT32) return kv.value as number;
  if (kv?.type === GgufValueType.INT32 && (kv.value as number) >= 0) return kv.value as number;
  return undefined;
}

/** Any array value (nested arrays come back as GgufArray items), or undefined when the key is not an array. */
export function arrayKv(m: GgufModel, key: string): GgufArray | undefined {
  return m.tryGetArray(key);
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

/** Every tensor's name, in order. */
export function tensorNames(m: GgufModel): string[] {
  return m.tensors.map((t) => t.name);
}

/** Whether any tensor's name starts with `prefix`. */
export function hasTensorPrefix(m: GgufModel, prefix: string): boolean {
  return m.tensors.some((t) => t.name.startsWith(prefix));
}

/** Whether any tensor's name ends with `suffix`. */
export function hasTensorSuffix(m: GgufModel, suffix: string): boolean {
  return m.tensors.some((t) => t.name.endsWith(suffix));
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
