import { GgufValueType, ggmlTypeName, summarize, tensorByteSize, valueTypeName, type GgufArray, type GgufKv, type GgufModel, type GgufValue } from "@compat/gguf";
import { terminalSafe } from "./terminal";

/** Arrays longer than this are abbreviated unless --full (tokenizer vocabularies run to 262k items). */
const MAX_ITEMS_SHOWN = 8;
const MAX_STRING_SHOWN = 120;

export interface InspectOptions {
  /** Every array item and every string in full. */
  full?: boolean;
}

function clip(s: string, full: boolean): string {
  const json = JSON.stringify(s);
  return !full && json.length > MAX_STRING_SHOWN ? `${json.slice(0, MAX_STRING_SHOWN - 4)}…" (${s.length} chars)` : json;
}

function showValue(v: GgufValue, full: boolean): string {
  if (typeof v === "string") return clip(v, full);
  if (typeof v === "object") return showArray(v, full);
  return String(v);
}

function showArray(a: GgufArray, full: boolean): string {
  const n = full ? a.length : Math.min(a.length, MAX_ITEMS_SHOWN);
  const items: string[] = [];
  for (let i = 0; i < n; i++) items.push(showValue(a.at(i), full));
  return `[${items.join(", ")}${a.length > n ? `, … ${a.length - n} more` : ""}]`;
}

export function kvTypeLabel(kv: GgufKv): string {
  return kv.type === GgufValueType.ARRAY ? `ARRAY<${valueTypeName((kv.value as GgufArray).itemType)}>[${(kv.value as GgufArray).length}]` : valueTypeName(kv.type);
}

/** 1536 -> "1.5 KiB": binary units, as file sizes on disk; base 1000 gives "1.5 KB", as `ollama ls` shows sizes. */
export function humanBytes(bytes: number, base: 1000 | 1024 = 1024): string {
  const units = base === 1024 ? ["B", "KiB", "MiB", "GiB", "TiB"] : ["B", "KB", "MB", "GB", "TB"];
  let v = bytes;
  let i = 0;
  while (v >= base && i < units.length - 1) {
    v /= base;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** One line: architecture, counts and sizes (the file's architecture and name escaped: they stay on it). */
function summaryLine(m: GgufModel): string {
  const s = summarize(m);
  return (
    `${terminalSafe(s.architecture)}${s.name !== undefined ? ` "${terminalSafe(s.name)}"` : ""}: ${m.kvCount} KVs, ${m.tensors.length} tensors, ` +
    `${groupThousands(s.parameterCount)} parameters, ${humanBytes(s.totalTensorBytes)} of tensor data` +
    `${s.fileType !== undefined ? `, file type ${s.fileType}` : ""}`
  );
}

/** The human-readable `inspect` listing. */
export function formatInspect(file: string, m: GgufModel, opts: InspectOptions = {}): string {
  const full = opts.full === true;
  const s = summarize(m);
  const lines = [
    `${terminalSafe(file)}`,
    `  ${summaryLine(m)}`,
    `  GGUF v${m.version}${m.littleEndian ? "" : " (big-endian)"}, alignment ${m.alignment}`,
    `  bytes by dtype: ${Object.entries(s.bytesByType).map(([k, v]) => `${k} ${groupThousands(v)}`).join(", ") || "none"}`,
    ``,
    `metadata (${m.kvCount}):`,
  ];
  // keys and tensor names are the file's: escaped where they are printed, and before the columns are measured
  for (const kv of m) lines.push(`  ${terminalSafe(kv.key)}: ${kvTypeLabel(kv)} = ${showValue(kv.value, full)}`);
  lines.push("", `tensors (${m.tensors.length}):`);
  const rows = m.tensors.map((t) => [terminalSafe(t.name), ggmlTypeName(t.type), `[${t.shape.join(", ")}]`, humanBytes(tensorByteSize(t.type, t.shape))]);
  const widths = [0, 1, 2].map((c) => Math.max(0, ...rows.map((r) => r[c]!.length)));
  for (const r of rows) lines.push(`  ${r[0]!.padEnd(widths[0]!)}  ${r[1]!.padEnd(widths[1]!)}  ${r[2]!.padEnd(widths[2]!)}  ${r[3]!.padStart(10)}`);
  return lines.join("\n") + "\n";
}

function jsonValue(v: GgufValue): unknown {
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "object") return v.toArray().map(jsonValue);
  return v;
}

/** An array KV for --json: every item with --full, else the first MAX_ITEMS_SHOWN and `truncated: true`. */
function jsonArray(a: GgufArray, full: boolean): { value: unknown[]; length: number; truncated?: true } {
  if (full || a.length <= MAX_ITEMS_SHOWN) return { value: jsonValue(a) as unknown[], length: a.length };
  const head: unknown[] = [];
  for (let i = 0; i < MAX_ITEMS_SHOWN; i++) head.push(jsonValue(a.at(i)));
  return { value: head, length: a.length, truncated: true };
}

/** The `inspect --json` document: every KV with its GGUF type, every tensor with dtype, shape and bytes. */
export function inspectJson(m: GgufModel, opts: InspectOptions = {}): unknown {
  return {
    version: m.version,
    littleEndian: m.littleEndian,
    alignment: m.alignment,
    summary: summarize(m),
    metadata: m.kvs().map((kv) =>
      kv.type === GgufValueType.ARRAY
        ? { key: kv.key, type: valueTypeName(kv.type), itemType: valueTypeName((kv.value as GgufArray).itemType), ...jsonArray(kv.value as GgufArray, opts.full === true) }
        : { key: kv.key, type: valueTypeName(kv.type), value: jsonValue(kv.value) },
    ),
    tensors: m.tensors.map((t) => ({ name: t.name, type: ggmlTypeName(t.type), shape: t.shape, bytes: tensorByteSize(t.type, t.shape) })),
  };
}

/**
 * 1234567 -> "1,234,567", as `toLocaleString("en-US")` prints an integer, without it: the first
 * toLocaleString of a process initialises ICU's number formatting, which costs more than the whole
 * `inspect` of a small file. Anything but a safe integer still goes through toLocaleString.
 */
export function groupThousands(n: number): string {
  if (!Number.isSafeInteger(n)) return n.toLocaleString("en-US");
  const digits = String(Math.abs(n));
  let out = digits.slice(0, ((digits.length - 1) % 3) + 1);
  for (let i = out.length; i < digits.length; i += 3) out += "," + digits.slice(i, i + 3);
  return n < 0 ? "-" + out : out;
}

