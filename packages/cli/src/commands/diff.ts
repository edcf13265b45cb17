import { GgufValueType, ggmlTypeName, readGguf, type GgufArray, type GgufKv, type GgufModel, type GgufValue } from "@compat/gguf";
import { kvTypeLabel } from "../format";
import { paint, type CliIo } from "../io";
import { jsonText, terminalSafe } from "../terminal";
import { resolveInput } from "./resolve";

export interface KvChange {
  key: string;
  a: string;
  b: string;
}

export interface TensorChange {
  name: string;
  a: string;
  b: string;
}

export interface GgufDiff {
  kv: { onlyA: string[]; onlyB: string[]; changed: KvChange[] };
  tensors: { onlyA: string[]; onlyB: string[]; changed: TensorChange[]; sameOrder: boolean };
  identical: boolean;
}

function sameValue(x: GgufValue, y: GgufValue): boolean {
  if (typeof x !== "object" || typeof y !== "object") return x === y || (Number.isNaN(x) && Number.isNaN(y));
  if (x.itemType !== y.itemType || x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) if (!sameValue(x.at(i), y.at(i))) return false;
  return true;
}

/** A short, comparable rendering of a KV: its type and value (arrays by length and first items). */
function show(kv: GgufKv): string {
  const v = kv.value;
  if (kv.type !== GgufValueType.ARRAY) return `${kvTypeLabel(kv)} ${typeof v === "string" ? JSON.stringify(v.length > 80 ? v.slice(0, 77) + "…" : v) : String(v)}`;
  const a = v as GgufArray;
  const head = Array.from({ length: Math.min(4, a.length) }, (_, i) => JSON.stringify(a.at(i), (_k, x) => (typeof x === "bigint" ? x.toString() : x)));
  return `${kvTypeLabel(kv)} [${head.join(", ")}${a.length > 4 ? ", …" : ""}]`;
}

const tensorDesc = (t: { type: number; shape: readonly number[] }) => `${ggmlTypeName(t.type)} [${t.shape.join(", ")}]`;

/** KV and tensor-info differences between two GGUFs (values compared in full, tensor data not read). */
export function diffModels(a: GgufModel, b: GgufModel): GgufDiff {
  const kvA = new Map(a.kvs().map((kv) => [kv.key, kv]));
  const kvB = new Map(b.kvs().map((kv) => [kv.key, kv]));
  const changed: KvChange[] = [];
  for (const [key, x] of kvA) {
    const y = kvB.get(key);
    if (y && (x.type !== y.type || !sameValue(x.value, y.value))) changed.push({ key, a: show(x), b: show(y) });
  }
  const tA = new Map(a.tensors.map((t) => [t.name, t]));
  const tB = new Map(b.tensors.map((t) => [t.name, t]));
  const tChanged: TensorChange[] = [];
  for (const [name, x] of tA) {
    const y = tB.get(name);
    if (y && tensorDesc(x) !== tensorDesc(y)) tChanged.push({ name, a: tensorDesc(x), b: tensorDesc(y) });
  }
  const common = (names: string[], other: Map<string, unknown>) => names.filter((n) => other.has(n));
  const orderA = common([...tA.keys()], tB);
  const orderB = common([...tB.keys()], tA);
  const d: GgufDiff = {
    kv: { onlyA: [...kvA.keys()].filter((k) => !kvB.has(k)), onlyB: [...kvB.keys()].filter((k) => !kvA.has(k)), changed },
    tensors: {
      onlyA: [...tA.keys()].filter((n) => !tB.has(n)),
      onlyB: [...tB.keys()].filter((n) => !tA.has(n)),
      changed: tChanged,
      sameOrder: orderA.every((n, i) => orderB[i] === n),
    },
    identical: false,
  };
  d.identical = d.kv.onlyA.length + d.kv.onlyB.length + changed.length + d.tensors.onlyA.length + d.tensors.onlyB.length + tChanged.length === 0;
  return d;
}

export async function diffCommand(fileA: string, fileB: string, opts: { json?: boolean }, io: CliIo): Promise<void> {
  const a = await readGguf((await resolveInput(fileA, io)).path);
  let d: GgufDiff;
  try {
    const b = await readGguf((await resolveInput(fileB, io)).path);
    try {
      d = diffModels(a, b);
    } finally {
      await b.close();
    }
  } finally {
    await a.close();
  }
  if (opts.json) {
    io.out(jsonText({ a: fileA, b: fileB, ...d }, 2) + "\n");
    return;
  }
  // names, keys and values come from the files: escaped before any colour is added
  const paintOut = paint(io, "out");
  const c = (code: number, text: string) => paintOut(code, terminalSafe(text));
  const lines = [`--- ${terminalSafe(fileA)}`, `+++ ${terminalSafe(fileB)}`];
  if (d.identical) lines.push("same KVs and tensors (names, dtypes, shapes)" + (d.tensors.sameOrder ? "" : "; tensor order differs"));
  else {
    lines.push(`KVs: ${d.kv.onlyA.length} only in A, ${d.kv.onlyB.length} only in B, ${d.kv.changed.length} changed`);
    for (const k of d.kv.onlyA) lines.push(c(31, `- ${k}`));
    for (const k of d.kv.onlyB) lines.push(c(32, `+ ${k}`));
    for (const ch of d.kv.changed) lines.push(c(33, `~ ${ch.key}: ${ch.a} -> ${ch.b}`));
    lines.push(
      `tensors: ${d.tensors.onlyA.length} only in A, ${d.tensors.onlyB.length} only in B, ${d.tensors.changed.length} changed` +
        (d.tensors.sameOrder ? "" : "; order differs"),
    );
    for (const n of d.tensors.onlyA) lines.push(c(31, `- ${n}`));
    for (const n of d.tensors.onlyB) lines.push(c(32, `+ ${n}`));
    for (const ch of d.tensors.changed) lines.push(c(33, `~ ${ch.name}: ${ch.a} -> ${ch.b}`));
  }
  io.out(lines.join("\n") + "\n");
}
