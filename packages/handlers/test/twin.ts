import { GgufValueType, type GgufArray, type GgufKv, type GgufModel, readTensorData } from "@compat/gguf";
import { sameKv } from "../src/report";
import { fromF32, toF32 } from "@compat/tensor-ops";

export interface TwinDifferences {
  /** Keys the native file has that the translation lacks or holds with another type/value. */
  kv: string[];
  /** Tensor names present on one side only. */
  missingTensors: string[];
  extraTensors: string[];
  /** Tensors whose type or shape differ. */
  layout: string[];
  /** Tensors whose values differ after conversion to F32. */
  data: string[];
}

export interface TwinOptions {
  /** Keys llama.cpp does not read for this arch (each with a reason at the call site). */
  ignoreKeys?: readonly string[];
  /** Compare tensor values too (reads every tensor; fixtures are tiny). */
  compareData?: boolean;
  /**
   * Array keys and tensors the translation may hold a prefix of (fewer items or rows):
   * Ollama dropped trailing rows the reference cannot bring back. Compared on the prefix.
   */
  prefixOk?: readonly string[];
  /** Tensors whose dtype or shape may differ as long as the values agree element for element. */
  layoutMayDiffer?: readonly string[];
  /**
   * Tensors the Ollama file holds only at a lower precision than the native one (e.g. F16
   * where llama.cpp's converter keeps F32): compared with the native values rounded
   * through the given ggml type. Type and shape must still match.
   */
  roundedThrough?: Readonly<Record<string, number>>;
}

/**
 * Compares a translated model with the native twin llama.cpp's own converter would
 * write for the same weights: every native key must be present with the same GGUF
 * type and value, tensor sets must match by name, type and shape, and tensor values
 * must be equal once both sides are converted to F32.
 */
export async function compareWithNative(translated: GgufModel, native: GgufModel, opts: TwinOptions = {}): Promise<TwinDifferences> {
  const ignore = new Set(opts.ignoreKeys ?? []);
  const prefixOk = new Set(opts.prefixOk ?? []);
  const layoutMayDiffer = new Set(opts.layoutMayDiffer ?? []);
  const kv: string[] = [];
  for (const want of native) {
    if (ignore.has(want.key) || isInformational(want.key)) continue;
    const got = translated.get(want.key);
    const same = got !== undefined && (sameKv(got, want) || (prefixOk.has(want.key) && isArrayPrefix(got, want)));
    if (!same) kv.push(describe(want, got));
  }
  const nativeNames = new Set(native.tensors.map((t) => t.name));
  const translatedNames = new Set(translated.tensors.map((t) => t.name));
  const missingTensors = [...nativeNames].filter((n) => !translatedNames.has(n));
  const extraTensors = [...translatedNames].filter((n) => !nativeNames.has(n));
  const layout: string[] = [];
  const data: string[] = [];
  for (const n of native.tensors) {
    const t = translated.findTensor(n.name);
    if (t === undefined) continue;
    const count = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);
    const sameLayout = t.type === n.type && t.shape.join(",") === n.shape.join(",");
    const rowPrefix = prefixOk.has(n.name) && t.type === n.type && t.shape.length === n.shape.length &&
      t.shape.every((d, i) => (i === t.shape.length - 1 ? d <= n.shape[i]! : d === n.shape[i]));
    const valuesOnly = layoutMayDiffer.has(n.name) && count(t.shape) === count(n.shape);
    if (!sameLayout && !rowPrefix && !valuesOnly) {
      layout.push(`${n.name}: type ${t.type} [${t.shape}] vs native type ${n.type} [${n.shape}]`);
      continue;
    }
    if (opts.compareData === false) continue;
    const a = toF32(t.type, await readTensorData(t), count(t.shape));
    let b = toF32(n.type, await readTensorData(n), count(n.shape)).subarray(0, a.length);
    // a dtype difference is allowed here: compare with the native values stored as the translation's dtype
    if (t.type !== n.type) b = toF32(t.type, fromF32(t.type, b), b.length);
    const via = opts.roundedThrough?.[n.name];
    if (via !== undefined) b = toF32(via, fromF32(via, b), b.length);
    if (!sameFloats(a, b)) data.push(n.name);
  }
  return { kv, missingTensors, extraTensors, layout, data };
}

/** general.* keys other than architecture and alignment only describe the model (name, license, ...). */
function isInformational(key: string): boolean {
  return key.startsWith("general.") && key !== "general.architecture" && key !== "general.alignment";
}

/** got holds the first items of want (same item type). */
function isArrayPrefix(got: GgufKv, want: GgufKv): boolean {
  if (got.type !== GgufValueType.ARRAY || want.type !== GgufValueType.ARRAY) return false;
  const a = got.value as GgufArray;
  const b = want.value as GgufArray;
  if (a.itemType !== b.itemType || a.length > b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a.at(i), b.at(i))) return false;
  return true;
}

function sameFloats(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i]) && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return false;
  return true;
}

function describe(want: GgufKv, got: GgufKv | undefined): string {
  const show = (kv: GgufKv) =>
    kv.type === GgufValueType.ARRAY ? `array(${(kv.value as { length: number }).length})` : JSON.stringify(String(kv.value)).slice(0, 60);
  return got === undefined ? `${want.key}: missing (native ${show(want)})` : `${want.key}: ${show(got)} (type ${got.type}) vs native ${show(want)} (type ${want.type})`;
}
