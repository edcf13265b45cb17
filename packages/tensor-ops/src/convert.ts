/**
 * Conversion of any supported ggml tensor to f32: one generic entry point plus per-type helpers.
 * Inputs are validated completely before any output is produced.
 */
import { BlockAlignmentError, ByteLengthError, UnsupportedTypeError } from "./errors";
import { bf16BytesToF32, encodeBf16, encodeF16, f16BytesToF32 } from "./half";
import { blockLayout, GgmlTypeId, typeName } from "./types";
import type { DequantKernel } from "./dequant/kernel";
import * as simple from "./dequant/simple";
import * as k from "./dequant/kquants";
import * as iq from "./dequant/iquants";
import { nativeAddon, wasmTier } from "./native";

const T = GgmlTypeId;

const copyF32: DequantKernel = (src, dst, n) => {
  new Uint8Array(dst.buffer, dst.byteOffset, n * 4).set(src.subarray(0, n * 4));
};

/** JS kernels by ggml type number. */
const jsKernels = new Map<number, DequantKernel>([
  [T.F32, copyF32],
  [T.F16, f16BytesToF32],
  [T.BF16, bf16BytesToF32],
  [T.Q4_0, simple.dequantQ4_0],
  [T.Q4_1, simple.dequantQ4_1],
  [T.Q5_0, simple.dequantQ5_0],
  [T.Q5_1, simple.dequantQ5_1],
  [T.Q8_0, simple.dequantQ8_0],
  [T.MXFP4, simple.dequantMXFP4],
  [T.NVFP4, simple.dequantNVFP4],
  [T.IQ4_NL, simple.dequantIQ4_NL],
  [T.Q1_0, simple.dequantQ1_0],
  [T.Q2_0, simple.dequantQ2_0],
  [T.Q2_K, k.dequantQ2_K],
  [T.Q3_K, k.dequantQ3_K],
  [T.Q4_K, k.dequantQ4_K],
  [T.Q5_K, k.dequantQ5_K],
  [T.Q6_K, k.dequantQ6_K],
  [T.Q8_K, k.dequantQ8_K],
  [T.IQ4_XS, k.dequantIQ4_XS],
  [T.TQ1_0, k.dequantTQ1_0],
  [T.TQ2_0, k.dequantTQ2_0],
  [T.IQ2_XXS, iq.dequantIQ2_XXS],
  [T.IQ2_XS, iq.dequantIQ2_XS],
  [T.IQ2_S, iq.dequantIQ2_S],
  [T.IQ3_XXS, iq.dequantIQ3_XXS],
  [T.IQ3_S, iq.dequantIQ3_S],
  [T.IQ1_S, iq.dequantIQ1_S],
  [T.IQ1_M, iq.dequantIQ1_M],
]);

/** ggml types `toF32` can convert. */
export const TO_F32_TYPES: readonly number[] = [...jsKernels.keys()];

export function canConvertToF32(type: number): boolean {
  return jsKernels.has(type);
}

function kernelFor(type: number): DequantKernel {
  blockLayout(type); // unknown numbers throw UnknownTypeError
  const kernel = jsKernels.get(type);
  if (!kernel) throw new UnsupportedTypeError(type, typeName(type), "conversion to F32");
  return kernel;
}

/** Checks type, counts and lengths; returns the number of blocks. Throws before any work is done. */
export function validateToF32(type: number, byteLength: number, nElements: number): number {
  kernelFor(type);
  const layout = blockLayout(type);
  if (!Number.isSafeInteger(nElements) || nElements < 0) {
    throw new ByteLengthError(`element count ${String(nElements)} is not a non-negative integer`, 0, byteLength);
  }
  if (nElements % layout.blockSize !== 0) throw new BlockAlignmentError(layout.name, nElements, layout.blockSize);
  const nBlocks = nElements / layout.blockSize;
  const expected = nBlocks * layout.blockBytes;
  if (byteLength !== expected) throw new ByteLengthError(`${layout.name} tensor of ${nElements} elements`, expected, byteLength);
  return nBlocks;
}

/**
 * Converts `nElements` elements of ggml `type` from `bytes` into `out` (starting at out[0]).
 * Uses the native kernel when active, then the WASM one, otherwise JS; all give identical bits.
 */
export function toF32Into(type: number, bytes: Uint8Array, out: Float32Array, nElements: number): Float32Array {
  const nBlocks = validateToF32(type, bytes.byteLength, nElements);
  if (out.length < nElements) throw new ByteLengthError("output buffer", nElements * 4, out.byteLength);
  if (nBlocks === 0) return out;
  const addon = nativeAddon();
  if (addon && addon.toF32(type, bytes, out, nBlocks)) return out;
  const wasm = wasmTier();
  if (wasm && wasm.toF32(type, bytes, out, nBlocks)) return out;
  (jsKernels.get(type) as DequantKernel)(bytes, out, nBlocks);
  return out;
}

/** Same conversion, JS kernels only (for tests and benchmarks comparing backends). */
export function toF32IntoJs(type: number, bytes: Uint8Array, out: Float32Array, nElements: number): Float32Array {
  const nBlocks = validateToF32(type, bytes.byteLength, nElements);
  if (out.length < nElements) throw new ByteLengthError("output buffer", nElements * 4, out.byteLength);
  if (nBlocks > 0) (jsKernels.get(type) as DequantKernel)(bytes, out, nBlocks);
  return out;
}

/** Converts a whole tensor of ggml `type` (raw GGUF bytes) to a new Float32Array. */
export function toF32(type: number, bytes: Uint8Array, nElements: number): Float32Array {
  validateToF32(type, bytes.byteLength, nElements);
  return toF32Into(type, bytes, new Float32Array(nElements), nElements);
}

/** Element count implied by a byte length (whole blocks only). */
export function elementsIn(type: number, byteLength: number): number {
  const layout = blockLayout(type);
  if (byteLength % layout.blockBytes !== 0) {
    throw new ByteLengthError(`${layout.name} data must be whole ${layout.blockBytes}-byte blocks`, byteLength - (byteLength % layout.blockBytes), byteLength);
  }
  return (byteLength / layout.blockBytes) * layout.blockSize;
}

const byLength = (type: number) => (bytes: Uint8Array): Float32Array => toF32(type, bytes, elementsIn(type, bytes.byteLength));

export const f16ToF32 = byLength(T.F16);
export const bf16ToF32 = byLength(T.BF16);
export const dequantizeQ4_0 = byLength(T.Q4_0);
export const dequantizeQ4_1 = byLength(T.Q4_1);
export const dequantizeQ5_0 = byLength(T.Q5_0);
export const dequantizeQ5_1 = byLength(T.Q5_1);
export const dequantizeQ8_0 = byLength(T.Q8_0);
export const dequantizeQ2_K = byLength(T.Q2_K);
export const dequantizeQ3_K = byLength(T.Q3_K);
export const dequantizeQ4_K = byLength(T.Q4_K);
export const dequantizeQ5_K = byLength(T.Q5_K);
export const dequantizeQ6_K = byLength(T.Q6_K);
export const dequantizeQ8_K = byLength(T.Q8_K);
export const dequantizeIQ4_NL = byLength(T.IQ4_NL);
export const dequantizeIQ4_XS = byLength(T.IQ4_XS);
export const dequantizeMXFP4 = byLength(T.MXFP4);
export const dequantizeNVFP4 = byLength(T.NVFP4);
export const dequantizeQ1_0 = byLength(T.Q1_0);
export const dequantizeQ2_0 = byLength(T.Q2_0);
export const dequantizeTQ1_0 = byLength(T.TQ1_0);
export const dequantizeTQ2_0 = byLength(T.TQ2_0);
export const dequantizeIQ2_XXS = byLength(T.IQ2_XXS);
export const dequantizeIQ2_XS = byLength(T.IQ2_XS);
export const dequantizeIQ2_S = byLength(T.IQ2_S);
export const dequantizeIQ3_XXS = byLength(T.IQ3_XXS);
export const dequantizeIQ3_S = byLength(T.IQ3_S);
export const dequantizeIQ1_S = byLength(T.IQ1_S);
export const dequantizeIQ1_M = byLength(T.IQ1_M);

function checkF32Input(src: Uint8Array | Float32Array): void {
  if (!(src instanceof Float32Array) && src.byteLength % 4 !== 0) {
    throw new ByteLengthError("F32 data must be whole 4-byte elements", src.byteLength - (src.byteLength % 4), src.byteLength);
  }
}

/** F32 (bytes or Float32Array) -> F16 bytes, rounding to nearest even exactly like GGML_FP32_TO_FP16. */
export function f32ToF16(src: Uint8Array | Float32Array): Uint8Array {
  checkF32Input(src);
  return encodeF16(src);
}

/** F32 (bytes or Float32Array) -> BF16 bytes, rounding like GGML_FP32_TO_BF16 (NaN made quiet). */
export function f32ToBf16(src: Uint8Array | Float32Array): Uint8Array {
  checkF32Input(src);
  return encodeBf16(src);
}

/** F32 values -> bytes of `type` (F32, F16 or BF16; quantizing is out of scope). */
export function fromF32(type: number, src: Float32Array): Uint8Array {
  if (type === T.F32) return new Uint8Array(src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength));
  if (type === T.F16) return encodeF16(src);
  if (type === T.BF16) return encodeBf16(src);
  blockLayout(type);
  throw new UnsupportedTypeError(type, typeName(type), "conversion from F32");
}
