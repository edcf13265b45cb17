/**
 * Axis permutation of ggml-shaped tensors, and the LLaMA Q/K head reordering used by
 * convert_hf_to_gguf.py (rows of each head regrouped from [2, half] to [half, 2]).
 */
import { ArgumentError, ShapeError } from "../errors";
import { checkTensor, formatOf, product, rowBytes, type Dtype, type Format, type TensorBytes } from "./tensor";

/** Copies `count` units of `unit` bytes, gathering from src offsets given by `srcIndex(i)` (in units). */
type UnitCopier = (src: Uint8Array, dst: Uint8Array, order: Int32Array | number[]) => void;

function copier(unit: number): UnitCopier {
  if (unit === 1 || unit === 2 || unit === 4) {
    return (src, dst, order) => {
      const Ctor = unit === 1 ? Uint8Array : unit === 2 ? Uint16Array : Uint32Array;
      const aligned = src.byteOffset % unit === 0 ? src : src.slice();
      const s = new Ctor(aligned.buffer as ArrayBuffer, aligned.byteOffset, aligned.byteLength / unit);
      const d = new Ctor(dst.buffer as ArrayBuffer, dst.byteOffset, dst.byteLength / unit);
      for (let i = 0; i < order.length; i++) d[i] = s[order[i] as number] as number;
    };
  }
  return (src, dst, order) => {
    for (let i = 0; i < order.length; i++) {
      const from = (order[i] as number) * unit;
      dst.set(src.subarray(from, from + unit), i * unit);
    }
  };
}

/**
 * numpy-transpose semantics on ggml shapes: output dimension i is input dimension `axes[i]`.
 * For quantized types, axis 0 must stay in place (rows are moved whole).
 */
export function permute(t: TensorBytes, dtype: Dtype, axes: readonly number[]): TensorBytes {
  const format = formatOf(dtype);
  checkTensor(t, format);
  const rank = t.shape.length;
  if (axes.length !== rank || [...axes].sort((a, b) => a - b).some((a, i) => a !== i)) {
    throw new ArgumentError(`axes [${axes.join(", ")}] are not a permutation of 0..${rank - 1}`);
  }
  const quantized = format.blockSize > 1;
  if (quantized && axes[0] !== 0) throw new ShapeError(`${format.name}: a permute of a quantized tensor must keep axis 0 first`);

  // Work in units: single elements, or whole rows when axis 0 stays put (fewer, larger copies).
  const rowsWhole = axes[0] === 0;
  const unit = rowsWhole ? rowBytes(format, t.shape[0] as number) : format.blockBytes;
  const dims = rowsWhole ? t.shape.slice(1) : [...t.shape];
  const order = rowsWhole ? axes.slice(1).map((a) => a - 1) : [...axes];
  const outShape = axes.map((a) => t.shape[a] as number);
  const n = product(dims);
  const out = new Uint8Array(t.data.byteLength);
  if (n === 0 || unit === 0) return { data: out, shape: outShape };

  // Input strides (in units) per input dim, then the output-ordered dims and strides.
  const inStride = dims.map((_, d) => product(dims, 0, d));
  const oDims = order.map((a) => dims[a] as number);
  const oStride = order.map((a) => inStride[a] as number);
  const index = new Int32Array(n);
  const counter = new Array<number>(oDims.length).fill(0);
  let src = 0;
  for (let i = 0; i < n; i++) {
    index[i] = src;
    // Odometer increment over output dims, fastest first.
    for (let d = 0; d < oDims.length; d++) {
      const c = (counter[d] as number) + 1;
      src += oStride[d] as number;
      if (c < (oDims[d] as number)) {
        counter[d] = c;
        break;
      }
      src -= (oStride[d] as number) * (oDims[d] as number);
      counter[d] = 0;
    }
  }
  copier(unit)(t.data, out, index);
  return { data: out, shape: outShape };
}

/** Inverse axes of a permutation, so permute(permute(t, a), inversePermutation(a)) = t. */
export function inversePermutation(axes: readonly number[]): number[] {
  const inv = new Array<number>(axes.length);
  axes.forEach((a, i) => {
    inv[a] = i;
  });
  return inv;
}

function headRowOrder(rows: number, nHead: number, inverse: boolean): Int32Array {
  if (nHead <= 0 || rows % (nHead * 2) !== 0) {
    throw new ShapeError(`${rows} rows cannot be split into ${nHead} heads of two halves`);
  }
  const half = rows / nHead / 2;
  const order = new Int32Array(rows);
  for (let h = 0; h < nHead; h++) {
    const base = h * 2 * half;
    for (let i = 0; i < half; i++) {
      for (let j = 0; j < 2; j++) {
        // Forward: output row base + 2i + j takes input row base + j*half + i.
        if (inverse) order[base + j * half + i] = base + 2 * i + j;
        else order[base + 2 * i + j] = base + j * half + i;
      }
    }
  }
  return order;
}

function reorderSlowest(t: TensorBytes, format: Format, order: Int32Array): TensorBytes {
  if (t.shape.length === 1 && format.blockSize > 1) throw new ShapeError(`${format.name}: a 1-D quantized tensor has no whole rows to reorder`);
  const rows = t.shape[t.shape.length - 1] as number;
  const unit = rows === 0 ? 0 : t.data.byteLength / rows;
  const out = new Uint8Array(t.data.byteLength);
  if (unit > 0) copier(unit)(t.data, out, order);
  return { data: out, shape: [...t.shape] };
}

function effectiveHeads(nHead: number, nHeadKv?: number): number {
  if (!Number.isSafeInteger(nHead) || nHead <= 0) throw new ArgumentError(`n_head must be a positive integer, got ${String(nHead)}`);
  return nHeadKv !== undefined && nHeadKv !== nHead ? nHeadKv : nHead;
}

/**
 * The Q/K permute convert_hf_to_gguf.py applies to LLaMA-family attention weights, on the slowest
 * axis (output features; a 1-D bias works too). With `nHeadKv` different from `nHead` the KV head
 * count is used, as the converter does for K.
 */
export function permuteQK(t: TensorBytes, dtype: Dtype, nHead: number, nHeadKv?: number): TensorBytes {
  const format = formatOf(dtype);
  checkTensor(t, format);
  const rows = t.shape[t.shape.length - 1] as number;
  return reorderSlowest(t, format, headRowOrder(rows, effectiveHeads(nHead, nHeadKv), false));
}

/** Undoes `permuteQK` (back to the Hugging Face row order). */
export function unpermuteQK(t: TensorBytes, dtype: Dtype, nHead: number, nHeadKv?: number): TensorBytes {
  const format = formatOf(dtype);
  checkTensor(t, format);
  const rows = t.shape[t.shape.length - 1] as number;
  return reorderSlowest(t, format, headRowOrder(rows, effectiveHeads(nHead, nHeadKv), true));
}
