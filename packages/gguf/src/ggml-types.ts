import { GgufError } from "./errors";

/**
 * ggml tensor element types, numbered as in ggml.h. Gaps (4, 5, 31-33, 36-38)
 * are types that were removed from GGUF files.
 */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
}

/** One past the highest type number llama.cpp accepts (GGML_TYPE_COUNT). */
export const GGML_TYPE_COUNT = 43;

export interface GgmlTypeInfo {
  /** ggml's own name, e.g. "q4_K", "bf16". */
  readonly name: string;
  /** Elements per block (1 for plain types). */
  readonly blockSize: number;
  /** Bytes per block. */
  readonly typeSize: number;
  readonly quantized: boolean;
}

const QK_K = 256;

// [type, name, block size, bytes per block, quantized] — sizes as in ggml-common.h's block structs.
const TABLE: ReadonlyArray<readonly [GgmlType, string, number, number, boolean]> = [
  [GgmlType.F32, "f32", 1, 4, false],
  [GgmlType.F16, "f16", 1, 2, false],
  [GgmlType.Q4_0, "q4_0", 32, 2 + 16, true],
  [GgmlType.Q4_1, "q4_1", 32, 2 + 2 + 16, true],
  [GgmlType.Q5_0, "q5_0", 32, 2 + 4 + 16, true],
  [GgmlType.Q5_1, "q5_1", 32, 2 + 2 + 4 + 16, true],
  [GgmlType.Q8_0, "q8_0", 32, 2 + 32, true],
  [GgmlType.Q8_1, "q8_1", 32, 2 + 2 + 32, true], // d and s are two halves
  [GgmlType.Q2_K, "q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4, true],
  [GgmlType.Q3_K, "q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12, true],
  [GgmlType.Q4_K, "q4_K", QK_K, 2 + 2 + QK_K / 2 + 12, true],
  [GgmlType.Q5_K, "q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12, true],
  [GgmlType.Q6_K, "q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, true],
  [GgmlType.Q8_K, "q8_K", QK_K, 4 + QK_K + QK_K / 8, true],
  [GgmlType.IQ2_XXS, "iq2_xxs", QK_K, 2 + QK_K / 4, true],
  [GgmlType.IQ2_XS, "iq2_xs", QK_K, 2 + QK_K / 4 + QK_K / 32, true],
  [GgmlType.IQ3_XXS, "iq3_xxs", QK_K, 2 + QK_K / 4 + QK_K / 8, true],
  [GgmlType.IQ1_S, "iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16, true],
  [GgmlType.IQ4_NL, "iq4_nl", 32, 2 + 16, true],
  [GgmlType.IQ3_S, "iq3_s", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, true],
  [GgmlType.IQ2_S, "iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16, true],
  [GgmlType.IQ4_XS, "iq4_xs", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, true],
  [GgmlType.I8, "i8", 1, 1, false],
  [GgmlType.I16, "i16", 1, 2, false],
  [GgmlType.I32, "i32", 1, 4, false],
  [GgmlType.I64, "i64", 1, 8, false],
  [GgmlType.F64, "f64", 1, 8, false],
  [GgmlType.IQ1_M, "iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, true],
  [GgmlType.BF16, "bf16", 1, 2, false],
  [GgmlType.TQ1_0, "tq1_0", QK_K, 2 + 4 * 13, true],
  [GgmlType.TQ2_0, "tq2_0", QK_K, 2 + 64, true],
  [GgmlType.MXFP4, "mxfp4", 32, 1 + 16, true],
  [GgmlType.NVFP4, "nvfp4", 64, 4 + 32, true],
  [GgmlType.Q1_0, "q1_0", 128, 2 + 16, true],
  [GgmlType.Q2_0, "q2_0", 64, 2 + 16, true],
];

const INFO: (GgmlTypeInfo | undefined)[] = new Array(GGML_TYPE_COUNT).fill(undefined);
const BY_NAME = new Map<string, GgmlType>();
for (const [type, name, blockSize, typeSize, quantized] of TABLE) {
  INFO[type] = Object.freeze({ name, blockSize, typeSize, quantized });
  BY_NAME.set(name.toLowerCase(), type);
}

/** True for type numbers that a current llama.cpp accepts in a GGUF file. */
export function isKnownGgmlType(type: number): boolean {
  return Number.isInteger(type) && type >= 0 && type < GGML_TYPE_COUNT && INFO[type] !== undefined;
}

/** Name, block size and block byte size of a ggml type; throws BAD_GGML_TYPE for unknown/removed types. */
export function ggmlTypeInfo(type: number): GgmlTypeInfo {
  const info = Number.isInteger(type) && type >= 0 ? INFO[type] : undefined;
  if (info === undefined) {
    throw new GgufError("BAD_GGML_TYPE", `unknown or removed ggml type ${type}`, {
      expected: `one of ${TABLE.map((t) => t[0]).join(", ")}`,
    });
  }
  return info;
}

/** ggml name of a type ("q4_K"), or `type<N>` for an unknown number. */
export function ggmlTypeName(type: number): string {
  return isKnownGgmlType(type) ? INFO[type]!.name : `type${type}`;
}

/** Look a type up by its ggml name, case-insensitively ("Q4_K", "bf16"). */
export function ggmlTypeFromName(name: string): GgmlType | undefined {
  return BY_NAME.get(name.toLowerCase());
}

/** All types in the table, in numeric order. */
export function allGgmlTypes(): GgmlType[] {
  return TABLE.map((t) => t[0]).sort((a, b) => a - b);
}

/** Number of elements of a shape; throws SHAPE_OVERFLOW past 2^53-1 and BAD_SHAPE for non-integers. */
export function elementCount(shape: readonly number[]): number {
  let n = 1;
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i]!;
    if (!Number.isSafeInteger(d) || d < 0) {
      throw new GgufError("BAD_SHAPE", `dimension ${i} is ${d}`, { expected: "a non-negative integer" });
    }
    n *= d;
    if (n > Number.MAX_SAFE_INTEGER) {
      throw new GgufError("SHAPE_OVERFLOW", `shape [${shape.join(", ")}] has more than 2^53-1 elements`);
    }
  }
  return n;
}

/**
 * Exact byte size of a contiguous tensor of `type` and `shape` (ggml order, shape[0] = row length).
 * shape[0] must be a multiple of the type's block size, as llama.cpp requires.
 */
export function tensorByteSize(type: number, shape: readonly number[]): number {
  const info = ggmlTypeInfo(type);
  const n = elementCount(shape);
  const row = shape.length > 0 ? shape[0]! : 1;
  if (row % info.blockSize !== 0) {
    throw new GgufError("BAD_SHAPE", `row length ${row} is not a multiple of the ${info.name} block size`, {
      expected: `a multiple of ${info.blockSize}`,
    });
  }
  const bytes = (n / info.blockSize) * info.typeSize;
  if (bytes > Number.MAX_SAFE_INTEGER) {
    throw new GgufError("SHAPE_OVERFLOW", `tensor of shape [${shape.join(", ")}] is larger than 2^53-1 bytes`);
  }
  return bytes;
}
