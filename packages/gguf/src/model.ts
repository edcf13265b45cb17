import { NumberArray, BigIntArray, checkScalar, ggufArray, isNumberItemType, valueTypeName, type ArrayInput } from "./arrays";
import { GgufError, type GgufErrorDetails } from "./errors";
import { tensorByteSize } from "./ggml-types";
import { GGUF_DEFAULT_ALIGNMENT, GgufKeys } from "./keys";
import { GgufValueType, type ByteSource, type GgufArray, type GgufKv, type GgufTensor, type GgufValue } from "./types";

export interface CreateModelOptions {
  /** GGUF version to write (2 or 3). Default 3. */
  version?: number;
  /** Byte order of the file. Default true. */
  littleEndian?: boolean;
}

export interface GgufModelInit extends CreateModelOptions {
  kvs?: Iterable<GgufKv>;
  tensors?: GgufTensor[];
  /** Sources this model opened itself and should close. */
  ownedSources?: ByteSource[];
  /** Where the model was read from, if anywhere. */
  source?: ByteSource;
  dataOffset?: number;
  /** See GgufModel.padEmptyHeader. Default true. */
  padEmptyHeader?: boolean;
  /** Where each KV read from a file starts in it (for errors; an edited KV has none). */
  kvOffsets?: WeakMap<GgufKv, number>;
}

const INTEGER_TYPES = new Set<number>([
  GgufValueType.UINT8,
  GgufValueType.INT8,
  GgufValueType.UINT16,
  GgufValueType.INT16,
  GgufValueType.UINT32,
  GgufValueType.INT32,
  GgufValueType.UINT64,
  GgufValueType.INT64,
]);

function toSafeNumber(key: string, v: bigint, where: GgufErrorDetails): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new GgufError("KV_TYPE", `value of "${key}" (${v}) does not fit in a JS number`, { ...where, expected: "|value| <= 2^53-1" });
  }
  return Number(v);
}

/**
 * A GGUF file's metadata and tensor list, editable in place. Keys keep their on-disk
 * value types and their order; tensors carry where their bytes come from.
 */
export class GgufModel implements Iterable<GgufKv> {
  version: number;
  littleEndian: boolean;
  /** Tensor infos in file order. Edit freely; the writer validates names, shapes and data lengths. */
  tensors: GgufTensor[];
  /** The source this model was parsed from, if any. */
  readonly source: ByteSource | undefined;
  /** Absolute offset of the data section in the source file (0 for models built in memory). */
  readonly dataOffset: number;
  /**
   * Whether a file with no tensors ends with the header padded to the alignment.
   * gguf.cpp always pads; gguf-py's vocab-only files do not. Kept from the source file so a
   * rewrite is byte-identical; irrelevant once the model has tensors.
   */
  padEmptyHeader: boolean;
  private readonly entries = new Map<string, GgufKv>();
  private readonly owned: ByteSource[];
  private readonly kvOffsets: WeakMap<GgufKv, number>;

  constructor(init: GgufModelInit = {}) {
    this.version = init.version ?? 3;
    this.littleEndian = init.littleEndian ?? true;
    this.tensors = init.tensors ?? [];
    this.source = init.source;
    this.dataOffset = init.dataOffset ?? 0;
    this.padEmptyHeader = init.padEmptyHeader ?? true;
    this.owned = init.ownedSources ?? [];
    this.kvOffsets = init.kvOffsets ?? new WeakMap();
    for (const kv of init.kvs ?? []) {
      if (this.entries.has(kv.key)) throw new GgufError("DUPLICATE_KEY", `duplicate metadata key "${kv.key}"`);
      this.entries.set(kv.key, kv);
    }
  }

  /** An empty model to build from scratch. */
  static create(opts: CreateModelOptions = {}): GgufModel {
    return new GgufModel(opts);
  }

  /** Close any file this model opened (readGguf(path)). Tensor ranges over it stop working. */
  async close(): Promise<void> {
    for (const s of this.owned.splice(0)) await s.close?.();
  }

  // ---- metadata -------------------------------------------------------------------------

  /** Data alignment: general.alignment when present, else 32. */
  get alignment(): number {
    const kv = this.entries.get(GgufKeys.ALIGNMENT);
    return kv !== undefined && kv.type === GgufValueType.UINT32 ? (kv.value as number) : GGUF_DEFAULT_ALIGNMENT;
  }

  get kvCount(): number {
    return this.entries.size;
  }

  kvs(): GgufKv[] {
    return Array.from(this.entries.values());
  }

  keys(): string[] {
    return Array.from(this.entries.keys());
  }

  [Symbol.iterator](): Iterator<GgufKv> {
    return this.entries.values();
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  get(key: string): GgufKv | undefined {
    return this.entries.get(key);
  }

  /** For errors: the file this model was read from and, for a KV as read from it, the KV's offset. */
  private where(kv?: GgufKv): GgufErrorDetails {
    const offset = kv === undefined ? undefined : this.kvOffsets.get(kv);
    return { ...(this.source !== undefined ? { source: this.source.name } : {}), ...(offset !== undefined ? { offset } : {}) };
  }

  private require(key: string, expected: string): GgufKv {
    const kv = this.entries.get(key);
    if (kv === undefined) throw new GgufError("KV_MISSING", `metadata key "${key}" is missing`, { ...this.where(), expected });
    return kv;
  }

  private mismatch(kv: GgufKv, expected: string): never {
    const actual = kv.type === GgufValueType.ARRAY ? `ARRAY of ${valueTypeName((kv.value as GgufArray).itemType)}` : valueTypeName(kv.type);
    throw new GgufError("KV_TYPE", `metadata key "${kv.key}" has type ${actual}`, { ...this.where(kv), expected });
  }

  getString(key: string, fallback?: string): string {
    const kv = this.entries.get(key);
    if (kv === undefined && fallback !== undefined) return fallback;
    const v = kv ?? this.require(key, "STRING");
    if (v.type !== GgufValueType.STRING) this.mismatch(v, "STRING");
    return v.value as string;
  }

  /** The value, or undefined when the key is missing or has another type. Never throws. */
  tryGetString(key: string): string | undefined {
    const kv = this.entries.get(key);
    return kv?.type === GgufValueType.STRING ? (kv.value as string) : undefined;
  }

  /** Any 8/16/32-bit integer or float; 64-bit integers when they fit in a JS number. */
  getNumber(key: string, fallback?: number): number {
    const kv = this.entries.get(key);
    if (kv === undefined && fallback !== undefined) return fallback;
    const v = kv ?? this.require(key, "a numeric type");
    if (isNumberItemType(v.type)) return v.value as number;
    if (v.type === GgufValueType.UINT64 || v.type === GgufValueType.INT64) return toSafeNumber(key, v.value as bigint, this.where(v));
    return this.mismatch(v, "a numeric type");
  }

  /** As getNumber, or undefined when missing, not numeric, or a 64-bit value past 2^53. Never throws. */
  tryGetNumber(key: string): number | undefined {
    return this.attempt(() => this.getNumber(key));
  }

  /** Exactly UINT32 (llama.cpp's get_u32 is this strict). */
  getU32(key: string, fallback?: number): number {
    const kv = this.entries.get(key);
    if (kv === undefined && fallback !== undefined) return fallback;
    const v = kv ?? this.require(key, "UINT32");
    if (v.type !== GgufValueType.UINT32) this.mismatch(v, "UINT32");
    return v.value as number;
  }

  /** Any integer type as bigint. */
  getBigInt(key: string, fallback?: bigint): bigint {
    const kv = this.entries.get(key);
    if (kv === undefined && fallback !== undefined) return fallback;
    const v = kv ?? this.require(key, "an integer type");
    if (!INTEGER_TYPES.has(v.type)) this.mismatch(v, "an integer type");
    return typeof v.value === "bigint" ? v.value : BigInt(v.value as number);
  }

  /** As getBigInt, or undefined when missing or not an integer. Never throws. */
  tryGetBigInt(key: string): bigint | undefined {
    return this.attempt(() => this.getBigInt(key));
  }

  getBool(key: string, fallback?: boolean): boolean {
    const kv = this.entries.get(key);
    if (kv === undefined && fallback !== undefined) return fallback;
    const v = kv ?? this.require(key, "BOOL");
    if (v.type !== GgufValueType.BOOL) this.mismatch(v, "BOOL");
    return v.value as boolean;
  }

  /** The value, or undefined when the key is missing or not a BOOL. Never throws. */
  tryGetBool(key: string): boolean | undefined {
    const kv = this.entries.get(key);
    return kv?.type === GgufValueType.BOOL ? (kv.value as boolean) : undefined;
  }

  /** An array value, optionally checking its item type. */
  getArray(key: string, itemType?: GgufValueType): GgufArray {
    const v = this.require(key, "ARRAY");
    if (v.type !== GgufValueType.ARRAY) this.mismatch(v, "ARRAY");
    const arr = v.value as GgufArray;
    if (itemType !== undefined && arr.itemType !== itemType) this.mismatch(v, `ARRAY of ${valueTypeName(itemType)}`);
    return arr;
  }

  /** As getArray, or undefined when missing, not an array, or of another item type. Never throws. */
  tryGetArray(key: string, itemType?: GgufValueType): GgufArray | undefined {
    return this.attempt(() => this.getArray(key, itemType));
  }

  /** What `get` returns, or undefined where it throws a GgufError (missing key, other type). */
  private attempt<T>(get: () => T): T | undefined {
    try {
      return get();
    } catch (e) {
      if (e instanceof GgufError) return undefined;
      throw e;
    }
  }

  getStringArray(key: string): string[] {
    return this.getArray(key, GgufValueType.STRING).toArray() as string[];
  }

  /** Items of a numeric array as numbers (64-bit items must fit in a JS number). */
  getNumberArray(key: string): number[] {
    const v = this.require(key, "numeric ARRAY");
    if (v.type !== GgufValueType.ARRAY) this.mismatch(v, "numeric ARRAY");
    const arr = v.value as GgufArray;
    if (arr instanceof NumberArray) return arr.toArray();
    if (arr instanceof BigIntArray) return arr.toArray().map((b) => toSafeNumber(key, b, this.where(v)));
    return this.mismatch(v, "numeric ARRAY");
  }

  /**
   * Set a value with an explicit GGUF type. Replacing keeps the key's position;
   * new keys are appended. For ARRAY pass a GgufArray (see ggufArray / setArray).
   */
  set(key: string, type: GgufValueType, value: GgufValue): this {
    if (typeof key !== "string" || key.length === 0) throw new GgufError("EMPTY_KEY", "metadata keys must be non-empty strings");
    const checked = checkScalar(type, value);
    if (key === GgufKeys.ALIGNMENT) {
      const a = checked as number;
      if (type !== GgufValueType.UINT32 || a === 0 || (a & (a - 1)) !== 0) {
        throw new GgufError("BAD_ALIGNMENT", `general.alignment must be a UINT32 power of two, got ${String(value)}`);
      }
    }
    this.entries.set(key, Object.freeze({ key, type, value: checked }));
    return this;
  }

  setString(key: string, value: string): this {
    return this.set(key, GgufValueType.STRING, value);
  }
  setU32(key: string, value: number): this {
    return this.set(key, GgufValueType.UINT32, value);
  }
  setI32(key: string, value: number): this {
    return this.set(key, GgufValueType.INT32, value);
  }
  setF32(key: string, value: number): this {
    return this.set(key, GgufValueType.FLOAT32, value);
  }
  setF64(key: string, value: number): this {
    return this.set(key, GgufValueType.FLOAT64, value);
  }
  setBool(key: string, value: boolean): this {
    return this.set(key, GgufValueType.BOOL, value);
  }
  setU64(key: string, value: bigint | number): this {
    return this.set(key, GgufValueType.UINT64, typeof value === "number" ? BigInt(value) : value);
  }
  setI64(key: string, value: bigint | number): this {
    return this.set(key, GgufValueType.INT64, typeof value === "number" ? BigInt(value) : value);
  }
  setArray(key: string, itemType: GgufValueType, values: ArrayInput): this {
    return this.set(key, GgufValueType.ARRAY, ggufArray(itemType, values));
  }

  delete(key: string): boolean {
    return this.entries.delete(key);
  }

  // ---- tensors --------------------------------------------------------------------------

  /**
   * Name -> tensor index, so lookups stay O(1) on files with 100k tensors (a translation
   * asks thousands of has/find questions). `tensors` is a public array, so the index is
   * rebuilt whenever that array was replaced or resized behind our back, and a hit is
   * checked against the tensor's current name. Rename through renameTensor: a name
   * assigned directly is found only after the next rebuild.
   */
  private byName: Map<string, GgufTensor> | undefined;
  private indexedArray: GgufTensor[] | undefined;
  private indexedLength = 0;

  private nameIndex(): Map<string, GgufTensor> {
    if (this.byName !== undefined && this.indexedArray === this.tensors && this.indexedLength === this.tensors.length) return this.byName;
    const map = new Map<string, GgufTensor>();
    // the first tensor of a name wins, as a linear search would find it
    for (const t of this.tensors) if (!map.has(t.name)) map.set(t.name, t);
    this.byName = map;
    this.indexedArray = this.tensors;
    this.indexedLength = this.tensors.length;
    return map;
  }

  private lookup(name: string): GgufTensor | undefined {
    const t = this.nameIndex().get(name);
    if (t === undefined || t.name === name) return t;
    // renamed by direct assignment: rebuild once
    this.byName = undefined;
    return this.nameIndex().get(name);
  }

  private indexOf(name: string): number {
    const t = this.lookup(name);
    return t === undefined ? -1 : this.tensors.indexOf(t);
  }

  hasTensor(name: string): boolean {
    return this.lookup(name) !== undefined;
  }

  findTensor(name: string): GgufTensor | undefined {
    return this.lookup(name);
  }

  /** The tensor named `name`; throws TENSOR_MISSING if there is none. */
  tensor(name: string): GgufTensor {
    const t = this.findTensor(name);
    if (t === undefined) throw new GgufError("TENSOR_MISSING", `no tensor named "${name}"`, this.where());
    return t;
  }

  renameTensor(from: string, to: string): GgufTensor {
    const t = this.tensor(from);
    if (from === to) return t;
    if (this.hasTensor(to)) throw new GgufError("DUPLICATE_TENSOR", `cannot rename "${from}": a tensor named "${to}" exists`);
    t.name = to;
    const map = this.nameIndex();
    map.delete(from);
    map.set(to, t);
    return t;
  }

  /** Remove a tensor and return it; throws TENSOR_MISSING if absent. */
  dropTensor(name: string): GgufTensor {
    const i = this.indexOf(name);
    if (i < 0) throw new GgufError("TENSOR_MISSING", `no tensor named "${name}"`, this.where());
    const map = this.nameIndex();
    const dropped = this.tensors.splice(i, 1)[0]!;
    map.delete(name);
    this.indexedLength = this.tensors.length;
    return dropped;
  }

  /**
   * Insert a tensor (at the end, or before/after a named one). Checks the name is new,
   * the type/shape are valid and the data length matches.
   */
  addTensor(t: GgufTensor, where: { before?: string; after?: string } = {}): GgufTensor {
    if (this.hasTensor(t.name)) throw new GgufError("DUPLICATE_TENSOR", `a tensor named "${t.name}" already exists`);
    checkTensor(t);
    let at = this.tensors.length;
    if (where.before !== undefined) at = this.indexOfRequired(where.before);
    else if (where.after !== undefined) at = this.indexOfRequired(where.after) + 1;
    const map = this.nameIndex();
    this.tensors.splice(at, 0, t);
    map.set(t.name, t);
    this.indexedLength = this.tensors.length;
    return t;
  }

  /**
   * Swap a tensor for a new info (e.g. retyped, reshaped, renamed, new data) in the same
   * position, after the same checks as addTensor.
   */
  replaceTensor(name: string, next: GgufTensor): GgufTensor {
    const i = this.indexOfRequired(name);
    if (next.name !== name && this.hasTensor(next.name)) {
      throw new GgufError("DUPLICATE_TENSOR", `a tensor named "${next.name}" already exists`);
    }
    checkTensor(next);
    const map = this.nameIndex();
    this.tensors[i] = next;
    map.delete(name);
    map.set(next.name, next);
    return next;
  }

  private indexOfRequired(name: string): number {
    const i = this.indexOf(name);
    if (i < 0) throw new GgufError("TENSOR_MISSING", `no tensor named "${name}"`, this.where());
    return i;
  }

  /** Deep copy of metadata and tensor infos; tensor data sources are shared. */
  clone(): GgufModel {
    return new GgufModel({
      version: this.version,
      littleEndian: this.littleEndian,
      kvs: this.entries.values(),
      tensors: this.tensors.map((t) => ({ ...t, shape: t.shape.slice() })),
      ...(this.source !== undefined ? { source: this.source } : {}),
      dataOffset: this.dataOffset,
      padEmptyHeader: this.padEmptyHeader,
      kvOffsets: this.kvOffsets,
    });
  }
}

/** Byte length a tensor's data will produce. */
export function tensorDataLength(t: Pick<GgufTensor, "data">): number {
  const d = t.data;
  return d.kind === "bytes" ? d.bytes.length : d.length;
}

/** Validate a tensor's type, shape and data length; returns its byte size. */
export function checkTensor(t: GgufTensor): number {
  if (typeof t.name !== "string") throw new GgufError("BAD_VALUE", "tensor name must be a string");
  let size: number;
  try {
    size = tensorByteSize(t.type, t.shape);
  } catch (e) {
    if (e instanceof GgufError) throw new GgufError(e.code, `tensor "${t.name}": ${e.message}`, e.expected !== undefined ? { expected: e.expected } : {});
    throw e;
  }
  if (t.shape.length > 4) throw new GgufError("BAD_SHAPE", `tensor "${t.name}" has ${t.shape.length} dimensions`, { expected: "at most 4" });
  const len = tensorDataLength(t);
  if (len !== size) {
    throw new GgufError("DATA_LENGTH", `tensor "${t.name}" data is ${len} bytes`, { expected: `${size} bytes for its type and shape` });
  }
  return size;
}

