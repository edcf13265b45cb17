import { GgmlType, GgufKeys, GgufValueType, ggmlTypeInfo, readTensorData, tensorByteSize, type GgufModel, type GgufTensor, type GgufValue, type TensorData } from "@compat/gguf";
import { concat, permuteQK, split, toF32 } from "@compat/tensor-ops";
import { blocksWithTensors, intArrayKv, missingOrDefault, stringArrayKv, stringKv, u32ArrayKv, u32Kv } from "./detect";
import { TranslationError } from "./errors";

/** A tensor's bytes as an op sees them, with the type and shape they had when captured. */
export interface OpInput {
  readonly name: string;
  readonly type: number;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
}

export interface OpSpec {
  /** What the op does, for reports and errors ("F16->F32 promote", "concat gate+up"). */
  readonly label: string;
  /** Source tensors whose bytes the op reads, by their name at registration time. */
  readonly inputs: readonly string[];
  /** Output type and shape; default: the destination's current ones. */
  readonly type?: number;
  readonly shape?: readonly number[];
  /** Produces exactly tensorByteSize(type, shape) bytes. */
  compute(inputs: OpInput[]): Uint8Array | Promise<Uint8Array>;
}

/** A registered op, as the report lists it. */
export interface OpRecord {
  readonly tensor: string;
  readonly label: string;
  readonly inputs: readonly string[];
}

/**
 * How faithfully a translation follows the reference. `native` (the default) also
 * applies the handlers' named fixes where Ollama's compat layer is known to behave
 * worse than the file llama.cpp's own converter writes; `reference` reproduces the
 * compat layer exactly, gaps included.
 */
export type TranslationProfile = "native" | "reference";
export const TRANSLATION_PROFILES: readonly TranslationProfile[] = Object.freeze(["native", "reference"]);

/** One correction a handler offers (see Translation.fix). */
export interface FixSpec {
  /** Stable id, "<handler>-<what>", e.g. "gemma3-add-space-prefix". */
  readonly name: string;
  /** What the reference gets wrong and what llama.cpp's converter writes instead. */
  readonly reason: string;
  /** Whether the draft still shows the gap; false on a file already fixed, so translating again stays a no-op. */
  needed(): boolean;
  /** Closes the gap with the other verbs. */
  apply(): void;
}

/** A fix as the report lists it. */
export interface FixRecord {
  readonly handler: string;
  readonly name: string;
  readonly reason: string;
}

/** Reads a TensorData into memory. @deprecated use readTensorData from @compat/gguf, which this calls. */
export function readTensorBytes(data: TensorData): Promise<Uint8Array> {
  return readTensorData({ name: "<tensor data>", data });
}

/**
 * The working state of one translation: a draft copy of the source model and the
 * small vocabulary of verbs handlers are written in. Every verb mirrors a helper of
 * the reference (copy/inject/rename KVs, truncate arrays, rename/retype/reshape
 * tensors, hide prefixes, register load ops) and keeps the reference's quirks, e.g.
 * copies never overwrite and renames of missing tensors are silent.
 */
export class Translation {
  readonly draft: GgufModel;
  /** Handler currently applying, for error messages. */
  handler: string | undefined;
  private readonly hidden: string[] = [];
  private keptTensorPrefixes: readonly string[] | undefined;
  private keptKeyPrefixes: readonly string[] | undefined;
  private readonly dropped: string[] = [];
  private readonly ops: OpRecord[] = [];
  private readonly fixes: FixRecord[] = [];
  private readonly gapsKept: FixRecord[] = [];

  /** Each draft tensor's name in the source, for the report (identity survives renames). */
  readonly origins = new Map<GgufTensor, string>();

  constructor(
    readonly source: GgufModel,
    /** Which fixes apply (see TranslationProfile). */
    readonly profile: TranslationProfile = "native",
  ) {
    this.draft = source.clone();
    this.draft.tensors.forEach((t, i) => this.origins.set(t, source.tensors[i]!.name));
  }

  // ---- architecture ----------------------------------------------------------------------

  get arch(): string {
    return this.draft.getString(GgufKeys.ARCHITECTURE, "");
  }

  /** Switches general.architecture (the gate later handlers see). */
  setArch(arch: string): void {
    this.draft.setString(GgufKeys.ARCHITECTURE, arch);
  }

  /** setArch(`to`), and every `<from>.*` key copied to `<to>.*` (Ollama's name for an arch llama.cpp calls `to`). */
  renameArch(from: string, to: string): void {
    this.setArch(to);
    this.copyKvPrefix(`${from}.`, `${to}.`);
  }

  // ---- metadata --------------------------------------------------------------------------

  has(key: string): boolean {
    return this.draft.has(key);
  }

  // Lenient typed reads: undefined where the key is missing or of another type, never a throw
  // (an odd type in an Ollama file is a reason to leave the key alone, as the reference does).

  /** A STRING value. */
  getString(key: string): string | undefined {
    return stringKv(this.draft, key);
  }
  /** A UINT32 value, or a non-negative INT32 one. */
  getU32(key: string): number | undefined {
    return u32Kv(this.draft, key);
  }
  /** The items of a STRING array. */
  getStringArray(key: string): string[] | undefined {
    return stringArrayKv(this.draft, key);
  }
  /** The items of a UINT32 array, or the non-negative ones of an INT32 array. */
  getU32Array(key: string): number[] | undefined {
    return u32ArrayKv(this.draft, key);
  }
  /** The items of an integer array of any width, each read as i32 (as the reference reads them). */
  getIntArray(key: string): number[] | undefined {
    return intArrayKv(this.draft, key);
  }
  /** Any array value with its item type (nested arrays come back as GgufArray items). */
  getArray(key: string): { itemType: GgufValueType; values: readonly unknown[] } | undefined {
    if (this.draft.get(key)?.type !== GgufValueType.ARRAY) return undefined;
    const arr = this.draft.getArray(key);
    return { itemType: arr.itemType, values: arr.toArray() };
  }
  /** A BOOL value. */
  getBool(key: string): boolean | undefined {
    const kv = this.draft.get(key);
    return kv?.type === GgufValueType.BOOL ? (kv.value as boolean) : undefined;
  }
  /** Missing, "" or "default" (a non-string value is not "default"). */
  isMissingOrDefault(key: string): boolean {
    return missingOrDefault(this.draft, key);
  }

  setString(key: string, value: string): void {
    this.draft.setString(key, value);
  }
  setU32(key: string, value: number): void {
    this.draft.setU32(key, value);
  }
  setBool(key: string, value: boolean): void {
    this.draft.setBool(key, value);
  }

  setArray(key: string, itemType: GgufValueType, values: readonly (number | bigint | boolean | string)[]): void {
    this.draft.setArray(key, itemType, values as never);
  }

  removeKv(key: string): void {
    this.draft.delete(key);
  }

  /** Copies src to dst with its GGUF type, unless src is missing or dst already exists. */
  copyKv(src: string, dst: string): void {
    if (this.draft.has(dst)) return;
    const kv = this.draft.get(src);
    if (kv === undefined) return;
    this.draft.set(dst, kv.type, kv.value);
  }

  /** copyKv for every key under oldPrefix; the old keys stay (llama.cpp never reads them). */
  copyKvPrefix(oldPrefix: string, newPrefix: string): void {
    for (const key of this.draft.keys()) {
      if (key.startsWith(oldPrefix)) this.copyKv(key, newPrefix + key.slice(oldPrefix.length));
    }
  }

  injectIfMissing(key: string, type: GgufValueType, value: GgufValue): void {
    if (!this.draft.has(key)) this.draft.set(key, type, value);
  }
  injectString(key: string, value: string): void {
    this.injectIfMissing(key, GgufValueType.STRING, value);
  }
  injectU32(key: string, value: number): void {
    this.injectIfMissing(key, GgufValueType.UINT32, value);
  }
  injectF32(key: string, value: number): void {
    this.injectIfMissing(key, GgufValueType.FLOAT32, value);
  }
  injectBool(key: string, value: boolean): void {
    this.injectIfMissing(key, GgufValueType.BOOL, value);
  }
  injectF32Array(key: string, values: readonly number[]): void {
    if (!this.draft.has(key)) this.draft.setArray(key, GgufValueType.FLOAT32, values);
  }

  /** Keeps the first n items of an array KV (no-op when missing or already short enough). */
  truncateArray(key: string, n: number): void {
    const kv = this.draft.get(key);
    if (kv === undefined || kv.type !== GgufValueType.ARRAY) return;
    const arr = this.draft.getArray(key);
    if (n >= arr.length) return;
    // Parsed vocabularies are cut without decoding them (a 262k-token array costs a view, not 262k strings).
    const head = (arr as { head?: (n: number) => GgufValue }).head;
    if (typeof head === "function") {
      this.draft.set(key, GgufValueType.ARRAY, head.call(arr, n));
      return;
    }
    const items = arr.toArray().slice(0, n);
    this.draft.setArray(key, arr.itemType, items as never);
  }

  /**
   * Replaces a per-layer array by its largest item as a scalar UINT32 (items read as
   * u32). A max of 0 falls back to `fallback`; if that is 0 too the key is left alone.
   */
  collapseArrayToMax(key: string, fallback: number): void {
    const kv = this.draft.get(key);
    if (kv?.type !== GgufValueType.ARRAY) return;
    let max = 0;
    for (const v of this.draft.getArray(key).toArray()) {
      const u = typeof v === "number" ? v >>> 0 : typeof v === "bigint" ? Number(BigInt.asUintN(32, v)) : 0;
      if (u > max) max = u;
    }
    if (max === 0) max = fallback;
    if (max !== 0) this.draft.setU32(key, max);
  }

  /** copyKvPrefix, leaving out keys whose part after oldPrefix starts with one of `except`. */
  copyKvPrefixExcept(oldPrefix: string, newPrefix: string, except: readonly string[]): void {
    for (const key of [...this.draft.keys()]) {
      if (!key.startsWith(oldPrefix)) continue;
      const rest = key.slice(oldPrefix.length);
      if (except.some((p) => rest.startsWith(p))) continue;
      this.copyKv(key, newPrefix + rest);
    }
  }

  /**
   * When the translation finishes, drops every key that starts with none of `prefixes`
   * (e.g. a clip view keeps only general.* and clip.*). Deferred, so keys set later count.
   */
  keepKeysOnly(prefixes: readonly string[]): void {
    this.keptKeyPrefixes = prefixes.slice();
  }

  /** Sets item `index` of an array KV, keeping its item type (no-op when the key is missing, not an array, or too short). */
  setArrayItem(key: string, index: number, value: number | bigint | boolean | string): void {
    const kv = this.draft.get(key);
    if (kv?.type !== GgufValueType.ARRAY) return;
    const arr = this.draft.getArray(key);
    if (index < 0 || index >= arr.length || Object.is(arr.at(index), value)) return;
    const items = arr.toArray().slice();
    items[index] = value;
    this.draft.setArray(key, arr.itemType, items as never);
  }

  /** copyKv for each [src, dst] pair, in order: a handler's table of keys Ollama named differently. */
  copyKvs(pairs: readonly (readonly [string, string])[]): void {
    for (const [src, dst] of pairs) this.copyKv(src, dst);
  }

  // ---- tensors ---------------------------------------------------------------------------

  tensor(name: string): GgufTensor | undefined {
    return this.draft.findTensor(name);
  }

  hasTensor(name: string): boolean {
    return this.draft.hasTensor(name);
  }

  anyTensorWithPrefix(prefix: string): boolean {
    return this.draft.tensors.some((t) => t.name.startsWith(prefix));
  }

  /** Block numbers below `count` that have tensors: a per-block loop bounded by the file, not by a key. */
  blocksWithTensors(count: number, prefix = "blk."): number[] {
    return blocksWithTensors(this.draft, count, prefix);
  }

  tensorNames(): string[] {
    return this.draft.tensors.map((t) => t.name);
  }

  /** Renames a tensor in place (position and data unchanged); silent when `from` is absent. */
  renameTensor(from: string, to: string): void {
    if (from === to || !this.draft.hasTensor(from)) return;
    if (this.draft.hasTensor(to)) {
      throw new TranslationError("TENSOR_CLASH", `cannot rename "${from}" to "${to}": that name is taken`, this.ctx(from));
    }
    this.draft.renameTensor(from, to);
  }

  /** Replaces the first occurrence of `needle` in every tensor name that contains it. */
  renameTensorsContaining(needle: string, replacement: string): void {
    for (const name of this.tensorNames()) {
      const at = name.indexOf(needle);
      if (at >= 0) this.renameTensor(name, name.slice(0, at) + replacement + name.slice(at + needle.length));
    }
  }

  /** Renames every tensor whose name ends with `oldSuffix`. */
  renameTensorSuffix(oldSuffix: string, newSuffix: string): void {
    for (const name of this.tensorNames()) {
      if (name.endsWith(oldSuffix)) this.renameTensor(name, name.slice(0, name.length - oldSuffix.length) + newSuffix);
    }
  }

  /**
   * Changes a tensor's type in the metadata only. Without an op the loader reads the
   * first bytes of the original range, so the new size must not exceed it.
   */
  retype(name: string, type: number): void {
    const t = this.draft.findTensor(name);
    if (t !== undefined) t.type = type;
  }

  /**
   * Changes a tensor's shape in the metadata only (see retype). A block-quantized tensor
   * keeps its bytes only if the new rows are whole blocks; otherwise a typed error.
   */
  reshape(name: string, shape: readonly number[]): void {
    const t = this.draft.findTensor(name);
    if (t === undefined) return;
    this.checkWholeBlocks(name, t.type, shape);
    t.shape = shape.slice();
  }

  /** Hides every tensor whose final name starts with prefix from the output. */
  hide(prefix: string): void {
    if (!this.hidden.includes(prefix)) this.hidden.push(prefix);
  }

  dropTensor(name: string): void {
    if (!this.draft.hasTensor(name)) return;
    this.draft.dropTensor(name);
    this.dropped.push(name);
  }

  /**
   * Registers a load op: `dest` (created when absent) gets bytes computed from the
   * inputs' bytes. The inputs' data sources are captured now, before later renames.
   */
  op(dest: string, spec: OpSpec): void {
    const captured = spec.inputs.map((name) => {
      const t = this.draft.findTensor(name);
      if (t === undefined) throw new TranslationError("OP_INPUT_MISSING", `op "${spec.label}" for "${dest}" needs tensor "${name}"`, this.ctx(dest));
      return { name, type: t.type, shape: t.shape.slice(), data: t.data };
    });
    let target = this.draft.findTensor(dest);
    const type = spec.type ?? target?.type;
    const shape = spec.shape?.slice() ?? target?.shape.slice();
    if (type === undefined || shape === undefined) {
      throw new TranslationError("OP_SHAPE", `op "${spec.label}" creates "${dest}" and must give its type and shape`, this.ctx(dest));
    }
    this.checkWholeBlocks(dest, type, shape);
    const length = tensorByteSize(type, shape);
    const label = spec.label;
    const handler = this.handler;
    const data: TensorData = {
      kind: "computed",
      length,
      label,
      async produce() {
        const inputs: OpInput[] = [];
        for (const c of captured) inputs.push({ name: c.name, type: c.type, shape: c.shape, bytes: await readTensorData(c) });
        let out: Uint8Array;
        try {
          out = await spec.compute(inputs);
        } catch (cause) {
          if (cause instanceof TranslationError) throw cause;
          const given = captured.map((c) => `${c.name} (${ggmlTypeName(c.type)} [${c.shape.join(", ")}])`).join(", ");
          throw new TranslationError("OP_FAILED", `op "${label}" for "${dest}" cannot take ${given}: ${cause instanceof Error ? cause.message : String(cause)}`, {
            ...(handler !== undefined ? { handler } : {}),
            tensor: dest,
            cause,
          });
        }
        if (out.length !== length) {
          throw new TranslationError("OP_LENGTH", `op "${label}" produced ${out.length} bytes for "${dest}", expected ${length}`, {
            ...(handler !== undefined ? { handler } : {}),
            tensor: dest,
          });
        }
        return out;
      },
    };
    if (target === undefined) {
      target = { name: dest, type, shape, data };
      const anchor = captured.at(-1)?.name;
      const after = anchor !== undefined && this.draft.hasTensor(anchor) ? anchor : undefined;
      this.draft.addTensor(target, after !== undefined ? { after } : {});
    } else {
      target.type = type;
      target.shape = shape;
      target.data = data;
    }
    this.ops.push({ tensor: dest, label, inputs: spec.inputs.slice() });
  }

  /**
   * The complement of hide: when the translation finishes, every tensor whose final name
   * starts with none of `prefixes` is hidden (a clip view keeps only its tower: v., mm., a.).
   */
  keepOnly(prefixes: readonly string[]): void {
    this.keptTensorPrefixes = prefixes.slice();
  }

  /** Stores an F16 tensor as F32 (an op); tensors of any other type are left alone, as in the reference. */
  promoteF16ToF32(name: string): void {
    const t = this.draft.findTensor(name);
    if (t?.type !== GgmlType.F16) return;
    const n = elementCount(t.shape);
    this.op(name, {
      label: "F16->F32 promote",
      inputs: [name],
      type: GgmlType.F32,
      shape: t.shape,
      compute: ([x]) => bytesOf(toF32(GgmlType.F16, x!.bytes, n)),
    });
  }

  /**
   * Reorders the output rows of a Q or K projection from Hugging Face's rotate-half order
   * to the interleaved pairs llama.cpp's RoPE expects (convert_hf_to_gguf's LLaMA permute),
   * `nHead` heads of ne[1]/nHead rows each. Whole rows move, so any dtype works.
   */
  permuteQKRows(name: string, nHead: number): void {
    const t = this.draft.findTensor(name);
    if (t === undefined) return;
    const rows = t.shape[t.shape.length - 1] ?? 0;
    if (!Number.isInteger(nHead) || nHead <= 0 || rows % (2 * nHead) !== 0) {
      throw new TranslationError("QK_HEADS", `"${name}" has ${rows} rows, which do not split into ${nHead} heads of two halves`, this.ctx(name));
    }
    this.op(name, {
      label: `Q/K RoPE permute (${nHead} heads)`,
      inputs: [name],
      compute: ([x]) => permuteQK({ data: x!.bytes, shape: x!.shape }, x!.type, nHead).data,
    });
  }

  /**
   * Creates `dest`, a 1-D F32 tensor holding row `row` of the 2-D tensor `source` (e.g. one
   * token's embedding). Only that row's bytes are read when the source is a file range or
   * bytes. Silent when `source` is missing or has no such row.
   */
  rowAsF32Tensor(dest: string, source: string, row: number): void {
    const t = this.draft.findTensor(source);
    const rows = t?.shape[1];
    if (t === undefined || t.shape.length !== 2 || rows === undefined || !Number.isInteger(row) || row < 0 || row >= rows) return;
    const width = t.shape[0]!;
    const label = `row ${row} of ${source} as F32`;
    const stride = tensorByteSize(t.type, [width]);
    const d = t.data;
    if (d.kind === "computed") {
      // an op's output exists only whole: take the row out of it
      this.op(dest, {
        label,
        inputs: [source],
        type: GgmlType.F32,
        shape: [width],
        compute: ([x]) => bytesOf(toF32(x!.type, split({ data: x!.bytes, shape: x!.shape }, x!.type, 1, [row, 1, rows - row - 1])[1]!.data, width)),
      });
      return;
    }
    // dest starts as a view of the row in the source's dtype, then an op converts it
    const rowData: TensorData =
      d.kind === "range" ? { ...d, offset: d.offset + row * stride, length: stride } : { kind: "bytes", bytes: d.bytes.subarray(row * stride, (row + 1) * stride) };
    if (this.draft.hasTensor(dest)) throw new TranslationError("TENSOR_CLASH", `cannot create "${dest}": that name is taken`, this.ctx(dest));
    this.draft.addTensor({ name: dest, type: t.type, shape: [width], data: rowData }, { after: source });
    this.op(dest, { label, inputs: [dest], type: GgmlType.F32, shape: [width], compute: ([x]) => bytesOf(toF32(x!.type, x!.bytes, width)) });
    this.ops[this.ops.length - 1] = { tensor: dest, label, inputs: [source] }; // the report names the real input
  }

  /**
   * `dest` (created or replaced) = `parts` joined along `axis` (an op labelled "concat <what>";
   * no-op when a part is missing). Same types: the bytes are joined as they are; mixed types
   * cannot be, so every part is widened to F32 first (label "… (mixed types -> F32)").
   */
  concatTensors(dest: string, parts: readonly string[], axis: number, what: string): void {
    const tensors = parts.map((n) => this.draft.findTensor(n));
    if (tensors.some((x) => x === undefined)) return;
    const first = tensors[0]!;
    const shape = first.shape.slice();
    shape[axis] = tensors.reduce((n, x) => n + x!.shape[axis]!, 0);
    const sameType = tensors.every((x) => x!.type === first.type);
    this.op(dest, {
      label: sameType ? `concat ${what}` : `concat ${what} (mixed types -> F32)`,
      inputs: parts,
      type: sameType ? first.type : GgmlType.F32,
      shape,
      compute: (xs) =>
        sameType
          ? concat(xs.map((x) => ({ data: x.bytes, shape: x.shape })), first.type, axis).data
          : concat(xs.map((x) => ({ data: bytesOf(toF32(x.type, x.bytes, x.shape.reduce((a, b) => a * b, 1))), shape: x.shape })), GgmlType.F32, axis).data,
    });
  }

  // ---- corrections ----------------------------------------------------------------------

  /**
   * A named correction of a known reference gap. Under the `native` profile it is
   * applied when `needed()` holds and listed in the report with its reason; under
   * `reference` the gap is kept and listed as such. Fixes must be idempotent through
   * `needed()`: a fixed file must not need the fix again.
   */
  fix(spec: FixSpec): void {
    if (!spec.needed()) return;
    const record: FixRecord = { handler: this.handler ?? "", name: spec.name, reason: spec.reason };
    // a fix a handler offers once per tensor (or block) is listed once
    const list = this.profile === "native" ? this.fixes : this.gapsKept;
    if (!list.some((r) => r.name === record.name)) list.push(record);
    if (this.profile === "native") spec.apply();
  }

  // ---- finishing -------------------------------------------------------------------------

  /** Applies hides, keepOnly/keepKeysOnly and range truncation; returns what the report needs. */
  finish(): { hidden: string[]; dropped: string[]; ops: OpRecord[]; fixes: FixRecord[]; gapsKept: FixRecord[] } {
    const hiddenNames: string[] = [];
    const kept = this.keptTensorPrefixes;
    this.draft.tensors = this.draft.tensors.filter((t) => {
      const hide = this.hidden.some((p) => t.name.startsWith(p)) || (kept !== undefined && !kept.some((p) => t.name.startsWith(p)));
      if (hide) hiddenNames.push(t.name);
      return !hide;
    });
    for (const t of this.draft.tensors) {
      if (t.data.kind === "computed") continue;
      const want = tensorByteSize(t.type, t.shape);
      const have = t.data.kind === "range" ? t.data.length : t.data.bytes.length;
      if (want > have) {
        throw new TranslationError(
          "RESHAPE_GROWS",
          `tensor "${t.name}" needs ${want} bytes after retype/reshape but its source holds ${have}`,
          { tensor: t.name },
        );
      }
      // a shrunk tensor keeps the first bytes of its data (e.g. the first rows after a reshape)
      if (want < have) t.data = t.data.kind === "range" ? { ...t.data, length: want } : { kind: "bytes", bytes: t.data.bytes.subarray(0, want) };
    }
    const keys = this.keptKeyPrefixes;
    if (keys !== undefined) for (const key of this.draft.keys()) if (!keys.some((p) => key.startsWith(p))) this.draft.delete(key);
    const opNames = new Set(this.draft.tensors.map((t) => t.name));
    return {
      hidden: hiddenNames,
      dropped: this.dropped.slice(),
      ops: this.ops.filter((o) => opNames.has(o.tensor)),
      fixes: this.fixes.slice(),
      gapsKept: this.gapsKept.slice(),
    };
  }

  /** A tensor of `type` may take `shape` only with rows of whole blocks (ggml's row layout). */
  private checkWholeBlocks(name: string, type: number, shape: readonly number[]): void {
    const block = ggmlTypeInfo(type).blockSize;
    const row = shape[0] ?? 1;
    if (row % block === 0) return;
    throw new TranslationError(
      "ROWS_NOT_BLOCKS",
      `"${name}" (${ggmlTypeName(type)}) cannot take shape [${shape.join(", ")}]: rows of ${row} are not whole ${ggmlTypeName(type)} blocks of ${block}`,
      this.ctx(name),
    );
  }

  private ctx(tensor: string): { handler?: string; tensor: string } {
    return this.handler !== undefined ? { handler: this.handler, tensor } : { tensor };
  }
}

function ggmlTypeName(type: number): string {
  return GgmlType[type] ?? `type ${type}`;
}

function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** The bytes of a Float32Array (a view, no copy). */
function bytesOf(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}
