import { GgufValueType, tensorByteSize, type GgufKv, type GgufModel } from "@compat/gguf";
import { readTensorBytes, sameKv } from "@compat/handlers";
import { toF32 } from "@compat/tensor-ops";

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
}

/**
 * Compares a translated model with the native twin llama.cpp's own converter would
 * write for the same weights: every native key must be present with the same GGUF
 * type and value, tensor sets must match by name, type and shape, and tensor values
 * must be equal once both sides are converted to F32.
 */
export async function compareWithNative(translated: GgufModel, native: GgufModel, opts: TwinOptions = {}): Promise<TwinDifferences> {
  const ignore = new Set(opts.ignoreKeys ?? []);
  const kv: string[] = [];
  for (const want of native) {
    if (ignore.has(want.key) || isInformational(want.key)) continue;
    const got = translated.get(want.key);
    if (got === undefined || !sameKv(got, want)) kv.push(describe(want, got));
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
    if (t.type !== n.type || t.shape.join(",") !== n.shape.join(",")) {
      layout.push(`${n.name}: type ${t.type} [${t.shape}] vs native type ${n.type} [${n.shape}]`);
      continue;
    }
    if (opts.compareData === false) continue;
    const count = n.shape.reduce((a, b) => a * b, 1);
    const a = toF32(t.type, await readTensorBytes(t.data), count);
    const b = toF32(n.type, await readTensorBytes(n.data), count);
    if (tensorByteSize(t.type, t.shape) !== tensorByteSize(n.type, n.shape) || !sameFloats(a, b)) data.push(n.name);
  }
  return { kv, missingTensors, extraTensors, layout, data };
}

/** general.* keys other than architecture and alignment only describe the model (name, license, ...). */
function isInformational(key: string): boolean {
  return key.startsWith("general.") && key !== "general.architecture" && key !== "general.alignment";
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
