import { BlockAlignmentError, ByteLengthError, UnknownTypeError } from "./errors";

/**
 * ggml type numbers (enum ggml_type in ggml.h). Kept local so this package has no dependencies;
 * the values are fixed by the GGUF format and match @compat/gguf's GgmlType.
 */
export const GgmlTypeId = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
  MXFP4: 39,
  NVFP4: 40,
  Q1_0: 41,
  Q2_0: 42,
} as const;

export type GgmlTypeName = keyof typeof GgmlTypeId;
export type GgmlTypeNumber = (typeof GgmlTypeId)[GgmlTypeName];

/** How one ggml type packs elements: `blockSize` elements are stored in `blockBytes` bytes. */
export interface BlockLayout {
  readonly type: number;
  readonly name: GgmlTypeName;
  readonly blockSize: number;
  readonly blockBytes: number;
  readonly quantized: boolean;
}

const layoutSpec: Record<GgmlTypeName, readonly [blockSize: number, blockBytes: number]> = {
  F32: [1, 4],
  F16: [1, 2],
  Q4_0: [32, 18],
  Q4_1: [32, 20],
  Q5_0: [32, 22],
  Q5_1: [32, 24],
  Q8_0: [32, 34],
  Q8_1: [32, 36],
  Q2_K: [256, 84],
  Q3_K: [256, 110],
  Q4_K: [256, 144],
  Q5_K: [256, 176],
  Q6_K: [256, 210],
  Q8_K: [256, 292],
  IQ2_XXS: [256, 66],
  IQ2_XS: [256, 74],
  IQ3_XXS: [256, 98],
  IQ1_S: [256, 50],
  IQ4_NL: [32, 18],
  IQ3_S: [256, 110],
  IQ2_S: [256, 82],
  IQ4_XS: [256, 136],
  I8: [1, 1],
  I16: [1, 2],
  I32: [1, 4],
  I64: [1, 8],
  F64: [1, 8],
  IQ1_M: [256, 56],
  BF16: [1, 2],
  TQ1_0: [256, 54],
  TQ2_0: [256, 66],
  MXFP4: [32, 17],
  NVFP4: [64, 36],
  Q1_0: [128, 18],
  Q2_0: [64, 18],
};

const layouts = new Map<number, BlockLayout>();
for (const name of Object.keys(layoutSpec) as GgmlTypeName[]) {
  const [blockSize, blockBytes] = layoutSpec[name];
  const type = GgmlTypeId[name];
  layouts.set(type, { type, name, blockSize, blockBytes, quantized: blockSize > 1 });
}

/** Block layout of a ggml type; throws UnknownTypeError for numbers outside the enum. */
export function blockLayout(type: number): BlockLayout {
  const layout = layouts.get(type);
  if (!layout) throw new UnknownTypeError(type);
  return layout;
}

export function isKnownType(type: number): boolean {
  return layouts.has(type);
}

export function typeName(type: number): GgmlTypeName {
  return blockLayout(type).name;
}

export function allTypes(): readonly BlockLayout[] {
  return [...layouts.values()];
}

function checkCount(what: string, n: number): void {
  if (!Number.isSafeInteger(n) || n < 0) throw new ByteLengthError(`${what} must be a non-negative safe integer`, 0, n);
}

/** Bytes needed for `nElements` elements of `type`; the count must be whole blocks. */
export function byteLengthOf(type: number, nElements: number): number {
  const layout = blockLayout(type);
  checkCount("element count", nElements);
  if (nElements % layout.blockSize !== 0) throw new BlockAlignmentError(layout.name, nElements, layout.blockSize);
  return (nElements / layout.blockSize) * layout.blockBytes;
}

/** Bytes in one row of `ne0` elements (ggml's nb[1] for a contiguous tensor). */
export function rowByteLength(type: number, ne0: number): number {
  return byteLengthOf(type, ne0);
}

/** Throws ByteLengthError unless `bytes` holds exactly `nElements` elements of `type`. */
export function expectByteLength(type: number, bytes: { byteLength: number }, nElements: number): number {
  const expected = byteLengthOf(type, nElements);
  if (bytes.byteLength !== expected) {
    throw new ByteLengthError(`${typeName(type)} tensor of ${nElements} elements`, expected, bytes.byteLength);
  }
  return expected;
}
