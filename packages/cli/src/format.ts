import { GgufValueType, ggmlTypeName, summarize, valueTypeName, type GgufArray, type GgufKv, type GgufModel, type GgufValue } from "@compat/gguf";

const MAX_ITEMS_SHOWN = 8;
const MAX_STRING_SHOWN = 120;

function clip(s: string): string {
  const json = JSON.stringify(s);
  return json.length > MAX_STRING_SHOWN ? `${json.slice(0, MAX_STRING_SHOWN - 4)}…" (${s.length} chars)` : json;
}

function showValue(v: GgufValue): string {
  if (typeof v === "string") return clip(v);
  if (typeof v === "object") return showArray(v);
  return String(v);
}

function showArray(a: GgufArray): string {
  const n = Math.min(a.length, MAX_ITEMS_SHOWN);
  const items: string[] = [];
  for (let i = 0; i < n; i++) items.push(showValue(a.at(i)));
  return `[${items.join(", ")}${a.length > n ? `, … ${a.length - n} more` : ""}]`;
}

export function kvTypeLabel(kv: GgufKv): string {
  return kv.type === GgufValueType.ARRAY ? `ARRAY<${valueTypeName((kv.value as GgufArray).itemType)}>[${(kv.value as GgufArray).length}]` : valueTypeName(kv.type);
}

/** The human-readable `inspect` listing. */
export function formatInspect(file: string, m: GgufModel): string {
  const s = summarize(m);
  const lines = [
    `${file}`,
    `  GGUF v${m.version}${m.littleEndian ? "" : " (big-endian)"}, alignment ${m.alignment}`,
    `  architecture ${s.architecture}${s.name !== undefined ? ` (${s.name})` : ""}, ${s.parameterCount.toLocaleString("en-US")} parameters` +
      `${s.fileType !== undefined ? `, file type ${s.fileType}` : ""}`,
    `  bytes by dtype: ${Object.entries(s.bytesByType).map(([k, v]) => `${k} ${v.toLocaleString("en-US")}`).join(", ") || "none"}`,
    ``,
    `metadata (${m.kvCount}):`,
  ];
  for (const kv of m) lines.push(`  ${kv.key}: ${kvTypeLabel(kv)} = ${showValue(kv.value)}`);
  lines.push("", `tensors (${m.tensors.length}):`);
  for (const t of m.tensors) lines.push(`  ${t.name}: ${ggmlTypeName(t.type)} [${t.shape.join(", ")}]`);
  return lines.join("\n") + "\n";
}

function jsonValue(v: GgufValue): unknown {
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "object") return v.toArray().map(jsonValue);
  return v;
}

/** The `inspect --json` document: every KV with its GGUF type, every tensor with dtype and shape. */
export function inspectJson(m: GgufModel): unknown {
  return {
    version: m.version,
    littleEndian: m.littleEndian,
    alignment: m.alignment,
    summary: summarize(m),
    metadata: m.kvs().map((kv) => ({
      key: kv.key,
      type: valueTypeName(kv.type),
      ...(kv.type === GgufValueType.ARRAY ? { itemType: valueTypeName((kv.value as GgufArray).itemType) } : {}),
      value: jsonValue(kv.value),
    })),
    tensors: m.tensors.map((t) => ({ name: t.name, type: ggmlTypeName(t.type), shape: t.shape })),
  };
}
