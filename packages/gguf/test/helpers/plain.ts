import { createHash } from "node:crypto";
import { GgufValueType, isGgufArray, readTensorData, type GgufArray, type GgufModel, type GgufValue } from "@compat/gguf";

/** JSON-friendly view of a value: bigint as "<n>n", arrays as plain arrays. */
export function plainValue(v: GgufValue): unknown {
  if (typeof v === "bigint") return `${v}n`;
  if (isGgufArray(v)) return v.toArray().map(plainValue);
  return v;
}

export interface PlainField {
  key: string;
  type: number;
  itemType: number | null;
  value: unknown;
}

export function plainFields(m: GgufModel): PlainField[] {
  return m.kvs().map((kv) => ({
    key: kv.key,
    type: kv.type,
    itemType: kv.type === GgufValueType.ARRAY ? (kv.value as GgufArray).itemType : null,
    value: plainValue(kv.value),
  }));
}

export async function plainTensors(m: GgufModel): Promise<{ name: string; type: number; shape: number[]; sha256: string; nbytes: number }[]> {
  const out = [];
  for (const t of m.tensors) {
    const bytes = await readTensorData(t);
    out.push({ name: t.name, type: t.type, shape: t.shape.slice(), sha256: createHash("sha256").update(bytes).digest("hex"), nbytes: bytes.length });
  }
  return out;
}
