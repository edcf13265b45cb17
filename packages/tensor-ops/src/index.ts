// The public surface: conversions, layout ops, the kernel tiers, and the errors they throw. The ggml
// type table (GgmlType, ggmlTypeInfo, ggmlTypeName, tensorByteSize) is @compat/gguf's.
export {
  TensorOpsError,
  UnknownTypeError,
  UnsupportedTypeError,
  ByteLengthError,
  BlockAlignmentError,
  ShapeError,
  ArgumentError,
  type TensorOpsErrorCode,
} from "./errors";
export { toF32, toF32Into, fromF32, canConvertToF32 } from "./convert";
export { convertStream, type ConvertStreamOptions, type ChunkSource } from "./stream";
export { f16ToNumber, numberToF16, bf16ToNumber, numberToBf16 } from "./half";
export { type Dtype, type Shape, type TensorBytes } from "./layout/tensor";
export { concat, concatPieces, split, truncateRows, padAxis, padRows, zeros, interleaveExperts, deinterleaveExperts, stack, stackPieces, type JoinPiece } from "./layout/concat";
export { permute, inversePermutation, permuteQK, unpermuteQK } from "./layout/permute";
export { addScalar, resamplePositionGrid, type ResampleOptions } from "./layout/arith";
export { activeBackend, setBackend, backendInfo, ready, nativeFileCopy, nativeStringWalk, largeBytes, alignedBytes, type Backend, type BackendChoice } from "./native";
