/**
 * The derived ops: load ops the handlers share, each built on Translation.op and a
 * @compat/tensor-ops kernel, each mirroring one of the reference's registered loads
 * (F16->F32 promote, the Q/K RoPE permute, concat loads). An arch-specific op stays in its
 * handler's file, written with t.op directly.
 */
import { GgmlType, tensorByteSize, type TensorData } from "@compat/gguf";
import { concat, concatPieces, permuteQK, split, toF32 } from "@compat/tensor-ops";
import { TranslationError } from "./errors";
import type { Translation } from "./translation";

/** Stores an F16 tensor as F32 (an op); tensors of any other type are left alone, as in the reference. */
export function promoteF16ToF32(t: Translation, name: string): void {
  const x = t.draft.findTensor(name);
  if (x?.type !== GgmlType.F16) return;
  const n = elementCount(x.shape);
  t.op(name, {
    label: "F16->F32 promote",
    inputs: [name],
    type: GgmlType.F32,
    shape: x.shape,
    compute: ([input]) => bytesOf(toF32(GgmlType.F16, input!.bytes, n)),
  });
}

/**
 * Reorders the output rows of a Q or K projection from Hugging Face's rotate-half order
 * to the interleaved pairs llama.cpp's RoPE expects (convert_hf_to_gguf's LLaMA permute),
 * `nHead` heads of ne[1]/nHead rows each. Whole rows move, so any dtype works.
 */
export function permuteQKRows(t: Translation, name: string, nHead: number): void {
  const x = t.draft.findTensor(name);
  if (x === undefined) return;
  const rows = x.shape[x.shape.length - 1] ?? 0;
  if (!Number.isInteger(nHead) || nHead <= 0 || rows % (2 * nHead) !== 0) {
    throw new TranslationError("QK_HEADS", `"${name}" has ${rows} rows, which do not split into ${nHead} heads of two halves`, t.errorContext(name));
  }
  t.op(name, {
    label: `Q/K RoPE permute (${nHead} heads)`,
    inputs: [name],
    compute: ([input]) => permuteQK({ data: input!.bytes, shape: input!.shape }, input!.type, nHead).data,
  });
}

/**
 * Creates `dest`, a 1-D F32 tensor holding row `row` of the 2-D tensor `source` (e.g. one
 * token's embedding). Only that row's bytes are read when the source is a file range or
 * bytes. Silent when `source` is missing or has no such row.
 */
export function rowAsF32Tensor(t: Translation, dest: string, source: string, row: number): void {
  const x = t.draft.findTensor(source);
  const rows = x?.shape[1];
  if (x === undefined || x.shape.length !== 2 || rows === undefined || !Number.isInteger(row) || row < 0 || row >= rows) return;
  const width = x.shape[0]!;
  const label = `row ${row} of ${source} as F32`;
  const stride = tensorByteSize(x.type, [width]);
  const d = x.data;
  if (d.kind === "computed") {
    // an op's output exists only whole: take the row out of it
    t.op(dest, {
      label,
      inputs: [source],
      type: GgmlType.F32,
      shape: [width],
      compute: ([input]) => bytesOf(toF32(input!.type, split({ data: input!.bytes, shape: input!.shape }, input!.type, 1, [row, 1, rows - row - 1])[1]!.data, width)),
    });
    return;
  }
  // dest starts as a view of the row in the source's dtype, then an op converts it
  const rowData: TensorData =
    d.kind === "range" ? { ...d, offset: d.offset + row * stride, length: stride } : { kind: "bytes", bytes: d.bytes.subarray(row * stride, (row + 1) * stride) };
  if (t.draft.hasTensor(dest)) throw new TranslationError("TENSOR_CLASH", `cannot create "${dest}": that name is taken`, t.errorContext(dest));
  t.draft.addTensor({ name: dest, type: x.type, shape: [width], data: rowData }, { after: source });
  // the op reads the row view; the report names the real input
  t.op(dest, { label, inputs: [dest], sources: [source], type: GgmlType.F32, shape: [width], compute: ([input]) => bytesOf(toF32(input!.type, input!.bytes, width)) });
}

/**
 * `dest` (created or replaced) = `parts` joined along `axis` (an op labelled "concat <what>";
 * no-op when a part is missing). Same types: the bytes are joined as they are (a join: pieces
 * of the parts, no arithmetic); mixed types cannot be, so every part is widened to F32 first
 * (label "… (mixed types -> F32)").
 */
export function concatTensors(t: Translation, dest: string, parts: readonly string[], axis: number, what: string): void {
  const tensors = parts.map((n) => t.draft.findTensor(n));
  if (tensors.some((x) => x === undefined)) return;
  const first = tensors[0]!;
  const shape = first.shape.slice();
  shape[axis] = tensors.reduce((n, x) => n + x!.shape[axis]!, 0);
  const sameType = tensors.every((x) => x!.type === first.type);
  if (sameType) {
    // the bytes side by side: said as pieces (served from the source as they are), unless a join
    // along a fast axis would cut them into too many
    const pieces = concatPieces(tensors.map((x) => x!.shape), first.type, axis, MAX_JOIN_PIECES);
    const spec = { label: `concat ${what}`, inputs: parts, type: first.type, shape };
    if (pieces !== undefined) t.op(dest, { ...spec, join: pieces.pieces });
    else t.op(dest, { ...spec, compute: (xs) => concat(xs.map((x) => ({ data: x.bytes, shape: x.shape })), first.type, axis).data });
    return;
  }
  t.op(dest, {
    label: `concat ${what} (mixed types -> F32)`,
    inputs: parts,
    type: GgmlType.F32,
    shape,
    compute: (xs) => concat(xs.map((x) => ({ data: bytesOf(toF32(x.type, x.bytes, elementCount(x.shape))), shape: x.shape })), GgmlType.F32, axis).data,
  });
}

/**
 * The most pieces a join is said as (one extent each in a mount's plan). A join along the
 * slowest axis is one piece per part; along a faster one, one per part and row (or slab), and
 * past this it is computed instead.
 */
export const MAX_JOIN_PIECES = 4096;

/**
 * The one QKV join: `<prefix>attn_qkv.{weight,bias}` = q ‖ k ‖ v along the rows (the last ggml
 * axis), the fused tensor llama.cpp's converter keeps where Ollama split it; the parts go away.
 * Parts of one type are joined as bytes; parts of mixed types are widened to F32 first
 * (`mixed: "f32"`, concatTensors' rule) or left split (`mixed: "split"`, for towers clip.cpp
 * also runs with split Q/K/V). Parts whose other dimensions disagree are left split.
 */
export function joinQkv(t: Translation, prefix: string, opts: { mixed: "f32" | "split"; what: string }): void {
  for (const suffix of ["weight", "bias"]) {
    const names = ["q", "k", "v"].map((x) => `${prefix}attn_${x}.${suffix}`);
    const parts = names.map((n) => t.draft.findTensor(n));
    if (parts.some((p) => p === undefined)) continue;
    const first = parts[0]!;
    const axis = first.shape.length - 1;
    const others = (shape: readonly number[]) => shape.slice(0, axis).join();
    if (parts.some((p) => p!.shape.length !== first.shape.length || others(p!.shape) !== others(first.shape))) continue;
    if (opts.mixed === "split" && parts.some((p) => p!.type !== first.type)) continue;
    concatTensors(t, `${prefix}attn_qkv.${suffix}`, names, axis, opts.what);
    for (const n of names) t.dropTensor(n);
  }
}

function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** The bytes of a Float32Array (a view, no copy). */
function bytesOf(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}
