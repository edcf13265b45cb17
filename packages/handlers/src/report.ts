import { GgufValueType, ggmlTypeName, type GgufArray, type GgufKv, type GgufModel, type GgufTensor } from "@compat/gguf";
import type { FixRecord, OpRecord, TranslationProfile } from "./translation";

/** What a translation changed, for people (`--dry-run`) and machines (`--json`). */
export interface TranslationReport {
  /** Handlers applied, in dispatch order, with the markers each one found. */
  readonly handlers: ReadonlyArray<{ readonly name: string; readonly markers: readonly string[] }>;
  readonly arch: { readonly from: string; readonly to: string };
  readonly kv: { readonly added: readonly string[]; readonly changed: readonly string[]; readonly removed: readonly string[] };
  readonly tensors: {
    readonly renamed: ReadonlyArray<{ readonly from: string; readonly to: string }>;
    readonly retyped: ReadonlyArray<{ readonly name: string; readonly from: string; readonly to: string }>;
    readonly reshaped: ReadonlyArray<{ readonly name: string; readonly from: readonly number[]; readonly to: readonly number[] }>;
    readonly hidden: readonly string[];
    readonly dropped: readonly string[];
    readonly added: readonly string[];
  };
  readonly ops: readonly OpRecord[];
  /** The profile the translation ran under. */
  readonly profile: TranslationProfile;
  /** Corrections of known reference gaps that were applied (`native` profile), each with its reason. */
  readonly fixes: readonly FixRecord[];
  /** Known reference gaps left as the reference leaves them (`reference` profile): what `native` would fix. */
  readonly gapsKept: readonly FixRecord[];
}

function sameArray(a: GgufArray, b: GgufArray): boolean {
  if (a === b) return true;
  if (a.itemType !== b.itemType || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a.at(i);
    const y = b.at(i);
    if (typeof x === "object" && typeof y === "object") {
      if (!sameArray(x, y)) return false;
    } else if (!Object.is(x, y)) return false;
  }
  return true;
}

export function sameKv(a: GgufKv, b: GgufKv): boolean {
  if (a === b) return true;
  if (a.type !== b.type) return false;
  if (a.type === GgufValueType.ARRAY) return sameArray(a.value as GgufArray, b.value as GgufArray);
  return Object.is(a.value, b.value);
}

const sameShape = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((v, i) => v === b[i]);

/**
 * Diffs the source and translated models. Tensors are matched by identity of their
 * origin (the draft clones each source tensor), so renames are seen as renames.
 */
export function buildReport(opts: {
  source: GgufModel;
  output: GgufModel;
  origins: ReadonlyMap<GgufTensor, string>;
  handlers: ReadonlyArray<{ name: string; markers: string[] }>;
  hidden: readonly string[];
  dropped: readonly string[];
  ops: readonly OpRecord[];
  profile?: TranslationProfile;
  fixes?: readonly FixRecord[];
  gapsKept?: readonly FixRecord[];
}): TranslationReport {
  const { source, output } = opts;
  const added: string[] = [];
  const changed: string[] = [];
  for (const kv of output) {
    const before = source.get(kv.key);
    if (before === undefined) added.push(kv.key);
    else if (!sameKv(before, kv)) changed.push(kv.key);
  }
  const removed = source.keys().filter((k) => !output.has(k));

  const renamed: { from: string; to: string }[] = [];
  const retyped: { name: string; from: string; to: string }[] = [];
  const reshaped: { name: string; from: number[]; to: number[] }[] = [];
  const addedTensors: string[] = [];
  for (const t of output.tensors) {
    const originName = opts.origins.get(t);
    const orig = originName !== undefined ? source.findTensor(originName) : undefined;
    if (orig === undefined) {
      addedTensors.push(t.name);
      continue;
    }
    if (orig.name !== t.name) renamed.push({ from: orig.name, to: t.name });
    if (orig.type !== t.type) retyped.push({ name: t.name, from: ggmlTypeName(orig.type), to: ggmlTypeName(t.type) });
    if (!sameShape(orig.shape, t.shape)) reshaped.push({ name: t.name, from: orig.shape.slice(), to: t.shape.slice() });
  }
  return {
    handlers: opts.handlers.map((h) => ({ name: h.name, markers: h.markers.slice() })),
    arch: { from: source.getString("general.architecture", ""), to: output.getString("general.architecture", "") },
    kv: { added, changed, removed },
    tensors: { renamed, retyped, reshaped, hidden: opts.hidden.slice(), dropped: opts.dropped.slice(), added: addedTensors },
    ops: opts.ops.slice(),
    profile: opts.profile ?? "native",
    fixes: (opts.fixes ?? []).map((f) => ({ ...f })),
    gapsKept: (opts.gapsKept ?? []).map((f) => ({ ...f })),
  };
}

/** A few lines a person can read. */
export function formatReport(r: TranslationReport): string {
  const lines: string[] = [];
  lines.push(`handlers: ${r.handlers.map((h) => `${h.name} [${h.markers.join(", ")}]`).join("; ")}`);
  if (r.arch.from !== r.arch.to) lines.push(`architecture: ${r.arch.from} -> ${r.arch.to}`);
  const list = (label: string, items: readonly string[]) => {
    if (items.length > 0) lines.push(`${label} (${items.length}): ${items.join(", ")}`);
  };
  list("keys added", r.kv.added);
  list("keys changed", r.kv.changed);
  list("keys removed", r.kv.removed);
  list("tensors renamed", r.tensors.renamed.map((x) => `${x.from} -> ${x.to}`));
  list("tensors retyped", r.tensors.retyped.map((x) => `${x.name} ${x.from} -> ${x.to}`));
  list("tensors reshaped", r.tensors.reshaped.map((x) => `${x.name} [${x.from.join(",")}] -> [${x.to.join(",")}]`));
  list("tensors hidden", r.tensors.hidden);
  list("tensors dropped", r.tensors.dropped);
  list("tensors added", r.tensors.added);
  list("load ops", r.ops.map((o) => `${o.tensor} <- ${o.label}(${o.inputs.join(", ")})`));
  if (r.fixes.length > 0) {
    lines.push(`fixes of reference gaps (${r.fixes.length}, profile ${r.profile}):`);
    for (const f of r.fixes) lines.push(`  ${f.name} [${f.handler}]: ${f.reason}`);
  }
  if (r.gapsKept.length > 0) {
    lines.push(`reference gaps kept (${r.gapsKept.length}, profile ${r.profile}; --profile native fixes them):`);
    for (const f of r.gapsKept) lines.push(`  ${f.name} [${f.handler}]: ${f.reason}`);
  }
  return lines.join("\n");
}

/** True when the translation changed nothing llama.cpp would see (e.g. an already translated file). */
export function changesNothing(r: TranslationReport): boolean {
  const { kv, tensors } = r;
  return (
    kv.added.length + kv.changed.length + kv.removed.length === 0 &&
    tensors.renamed.length + tensors.retyped.length + tensors.reshaped.length === 0 &&
    tensors.hidden.length + tensors.dropped.length + tensors.added.length === 0 &&
    r.ops.length === 0
  );
}
