import { GgmlType, ggmlTypeInfo, isKnownGgmlType, tensorByteSize } from "@compat/gguf";
import { BlockAlignmentError, ByteLengthError, UnknownTypeError } from "./errors";

/**
 * ggml type numbers. The one table of types (numbers, block sizes, block bytes) is
 * @compat/gguf's; this package reads it rather than keeping a copy.
 */
export const GgmlTypeId = GgmlType;

export type GgmlTypeName = keyof typeof GgmlType;
export type GgmlTypeNumber = GgmlType;

/** How one ggml type packs elements: `blockSize` elements are stored in `blockBytes` bytes. */
export interface BlockLayout {
  readonly type: number;
  /** The enum name ("Q4_K"), as GgmlTypeId spells it. */
  readonly name: GgmlTypeName;
  readonly blockSize: number;
  readonly blockBytes: number;
  readonly quantized: boolean;
}

const layouts = new Map<number, BlockLayout>();

/** Block layout of a ggml type; throws UnknownTypeError for numbers outside the table. */
export function blockLayout(type: number): BlockLayout {
  let layout = layouts.get(type);
  if (layout === undefined) {
    if (!isKnownGgmlType(type)) throw new UnknownTypeError(type);
    const info = ggmlTypeInfo(type);
    const name = GgmlType[type] as GgmlTypeName;
    layout = Object.freeze({ type, name, blockSize: info.blockSize, blockBytes: info.typeSize, quantized: info.quantized });
    layouts.set(type, layout);
  }
  return layout;
}

export function isKnownType(type: number): boolean {
  return isKnownGgmlType(type);
}

export function typeName(type: number): GgmlTypeName {
  return blockLayout(type).name;
}

export function allTypes(): readonly BlockLayout[] {
  return Object.values(GgmlType)
    .filter((v): v is GgmlType => typeof v === "number")
    .sort((a, b) => a - b)
    .map(blockLayout);
}

/** Bytes needed for `nElements` elements of `type`; the count must be whole blocks. */
export function byteLengthOf(type: number, nElements: number): number {
  const layout = blockLayout(type);
  if (!Number.isSafeInteger(nElements) || nElements < 0) {
    throw new ByteLengthError("element count must be a non-negative safe integer", 0, nElements);
  }
  if (nElements % layout.blockSize !== 0) throw new BlockAlignmentError(layout.name, nElements, layout.blockSize);
  return tensorByteSize(type, [nElements]);
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
