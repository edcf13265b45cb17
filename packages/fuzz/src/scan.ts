/**
 * Where the fields of a valid GGUF header sit, so mutations can aim at them (a count set
 * to 2^64-1, a string length off by one, tensor infos shuffled) instead of only at random
 * bytes. Only ever run on the unmutated corpus (little-endian v2/v3), so it trusts its input.
 */

/** A field the fuzzer may overwrite: byte position and width (4 or 8). */
export interface FieldPos {
  readonly pos: number;
  readonly width: 4 | 8;
}

export type FieldKind =
  | "version"
  | "tensorCount"
  | "kvCount"
  | "keyLength"
  | "valueType"
  | "stringLength"
  | "arrayType"
  | "arrayCount"
  | "nDims"
  | "dim"
  | "ggmlType"
  | "tensorOffset"
  /** A 4- or 8-byte scalar value (block counts, head counts, rope bases, token ids...). */
  | "scalarValue"
  /** An item of a 4- or 8-byte numeric array (per-layer head counts, token types...), sampled. */
  | "arrayItem";

export interface HeaderMap {
  /** Fields by kind; string lengths inside long arrays are sampled (the first and every 97th). */
  readonly fields: Readonly<Record<FieldKind, readonly FieldPos[]>>;
  /** Start of each KV record, then the start of the tensor-info section. */
  readonly kvStarts: readonly number[];
  /** Start of each tensor-info record, then the end of the last one. */
  readonly tensorStarts: readonly number[];
  /** Where tensor data begins (after alignment padding). */
  readonly dataOffset: number;
}

const KINDS: readonly FieldKind[] = ["version", "tensorCount", "kvCount", "keyLength", "valueType", "stringLength", "arrayType", "arrayCount", "nDims", "dim", "ggmlType", "tensorOffset", "scalarValue", "arrayItem"];
const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

export function scanHeader(bytes: Uint8Array): HeaderMap {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const fields = Object.fromEntries(KINDS.map((k) => [k, [] as FieldPos[]])) as Record<FieldKind, FieldPos[]>;
  let p = 4;
  const u32 = (kind?: FieldKind): number => {
    if (kind) fields[kind].push({ pos: p, width: 4 });
    const v = dv.getUint32(p, true);
    p += 4;
    return v;
  };
  const u64 = (kind?: FieldKind): number => {
    if (kind) fields[kind].push({ pos: p, width: 8 });
    const v = Number(dv.getBigUint64(p, true));
    p += 8;
    return v;
  };
  const str = (kind: FieldKind | undefined): void => {
    const n = u64(kind);
    p += n;
  };
  u32("version");
  const nTensors = u64("tensorCount");
  const nKv = u64("kvCount");
  let alignment = 32;
  const kvStarts: number[] = [];
  for (let i = 0; i < nKv; i++) {
    kvStarts.push(p);
    const keyStart = p + 8;
    const keyLen = Number(dv.getBigUint64(p, true));
    str("keyLength");
    const key = new TextDecoder().decode(bytes.subarray(keyStart, keyStart + keyLen));
    const type = u32("valueType");
    if (type === 8) str("stringLength");
    else if (type === 9) {
      const itemType = u32("arrayType");
      const count = u64("arrayCount");
      for (let j = 0; j < count; j++) {
        if (itemType === 8) str(j === 0 || j % 97 === 0 ? "stringLength" : undefined);
        else if (itemType === 9) throw new Error("nested arrays are not in the corpus");
        else {
          const size = SCALAR_SIZE[itemType]!;
          if ((size === 4 || size === 8) && (j < 4 || j % 97 === 0)) fields.arrayItem.push({ pos: p, width: size });
          p += size;
        }
      }
    } else {
      if (key === "general.alignment" && type === 4) alignment = dv.getUint32(p, true);
      const size = SCALAR_SIZE[type]!;
      if (size === 4 || size === 8) fields.scalarValue.push({ pos: p, width: size });
      p += size;
    }
  }
  kvStarts.push(p);
  const tensorStarts: number[] = [];
  for (let i = 0; i < nTensors; i++) {
    tensorStarts.push(p);
    str(undefined);
    const nDims = u32("nDims");
    for (let d = 0; d < nDims; d++) u64("dim");
    u32("ggmlType");
    u64("tensorOffset");
  }
  tensorStarts.push(p);
  const dataOffset = Math.ceil(p / alignment) * alignment;
  return { fields, kvStarts, tensorStarts, dataOffset };
}

export const FIELD_KINDS = KINDS;
