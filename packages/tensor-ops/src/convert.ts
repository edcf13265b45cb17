/**
 * Conversion of any supported ggml tensor to f32 (and of f32 to F16/BF16): one entry point each way.
 * Inputs are validated completely before any output is produced.
 */
import { BlockAlignmentError, ByteLengthError, UnsupportedTypeError } from "./errors";
import { bf16BytesToF32, encodeBf16, encodeF16, f16BytesToF32 } from "./half";
import { GgmlType } from "@compat/gguf";
import { typeInfo } from "./types";
import type { DequantKernel } from "./dequant/kernel";
import * as simple from "./dequant/simple";
import * as k from "./dequant/kquants";
import * as iq from "./dequant/iquants";
import { largeBytes, nativeAddon, wasmTier } from "./native";

const T = GgmlType;

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

/** Whether `toF32` converts ggml `type` (every type ggml can turn into floats). */
export function canConvertToF32(type: number): boolean {
  return jsKernels.has(type);
}

function kernelFor(type: number): DequantKernel {
  const info = typeInfo(type); // unknown numbers throw UnknownTypeError
  const kernel = jsKernels.get(type);
  if (!kernel) throw new UnsupportedTypeError(type, info.name, "conversion to F32");
  return kernel;
}

/** Checks type, counts and lengths; returns the number of blocks. Throws before any work is done. */
export function validateToF32(type: number, byteLength: number, nElements: number): number {
  kernelFor(type);
  const layout = typeInfo(type);
  if (!Number.isSafeInteger(nElements) || nElements < 0) {
    throw new ByteLengthError(`element count ${String(nElements)} is not a non-negative integer`, 0, byteLength);
  }
  if (nElements % layout.blockSize !== 0) throw new BlockAlignmentError(layout.name, nElements, layout.blockSize);
  const nBlocks = nElements / layout.blockSize;
  const expected = nBlocks * layout.typeSize;
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

/** Same conversion, JS kernels only (not exported: tests and benchmarks compare the tiers with it). */
export function toF32IntoJs(type: number, bytes: Uint8Array, out: Float32Array, nElements: number): Float32Array {
  const nBlocks = validateToF32(type, bytes.byteLength, nElements);
  if (out.length < nElements) throw new ByteLengthError("output buffer", nElements * 4, out.byteLength);
  if (nBlocks > 0) (jsKernels.get(type) as DequantKernel)(bytes, out, nBlocks);
  return out;
}

/** Element count implied by a byte length (whole blocks only). */
function elementsIn(type: number, byteLength: number): number {
  const info = typeInfo(type);
  if (byteLength % info.typeSize !== 0) {
    throw new ByteLengthError(`${info.name} data must be whole ${info.typeSize}-byte blocks`, byteLength - (byteLength % info.typeSize), byteLength);
  }
  return (byteLength / info.typeSize) * info.blockSize;
}

/**
 * Converts a whole tensor of ggml `type` (raw GGUF bytes) to a new Float32Array: the one
 * dequantization entry point, for every type ggml can turn into floats. `nElements` defaults to
 * what the bytes hold (whole blocks); when given, the byte length must match it exactly.
 */
export function toF32(type: number, bytes: Uint8Array, nElements: number = elementsIn(type, bytes.byteLength)): Float32Array {
  validateToF32(type, bytes.byteLength, nElements);
  return toF32Into(type, bytes, new Float32Array(largeBytes(nElements * 4).buffer, 0, nElements), nElements);
}

/**
 * F32 values -> bytes of `type`: F32, F16 (round to nearest even, as GGML_FP32_TO_FP16; every NaN
 * becomes 0x7E00 with its sign) or BF16 (nearest even, NaN made quiet, as GGML_FP32_TO_BF16).
 * Quantizing is out of scope.
 */
export function fromF32(type: number, src: Float32Array): Uint8Array {
  if (type === T.F32) return new Uint8Array(src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength));
  if (type === T.F16) return encodeF16(src);
  if (type === T.BF16) return encodeBf16(src);
  throw new UnsupportedTypeError(type, typeInfo(type).name, "conversion from F32");
}
