import { GgmlType, GgufKeys, GgufValueType, ggmlTypeInfo, readTensorData, tensorByteSize, type BytesData, type GgufModel, type GgufTensor, type GgufValue, type RangeData, type TensorData } from "@compat/gguf";
import { largeBytes, type JoinPiece } from "@compat/tensor-ops";
import { TranslationError } from "./errors";
import { tensorNames } from "./reads";

/** A tensor's bytes as an op sees them, with the type and shape they had when captured. */
export interface OpInput {
  readonly name: string;
  readonly type: number;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
}

interface OpSpecBase {
  /** What the op does, for reports and errors ("F16->F32 promote", "concat gate+up"). */
  readonly label: string;
  /** Source tensors whose bytes the op reads, by their name at registration time. */
  readonly inputs: readonly string[];
  /** The tensors the report names as the op's inputs, when they are not `inputs` (an op over a view a derived op made). */
  readonly sources?: readonly string[];
  /** Output type and shape; default: the destination's current ones. */
  readonly type?: number;
  readonly shape?: readonly number[];
}

/**
 * An op's input, whole. A range of a file is read into largeBytes memory: an input is read once
 * and at once, and a large one in fresh 4 KiB pages pays a page fault per page.
 */
async function readInput(t: Pick<GgufTensor, "name" | "data">): Promise<Uint8Array> {
  const d = t.data;
  if (d.kind !== "range" || d.source.readInto === undefined) return readTensorData(t);
  const out = largeBytes(d.length);
  await d.source.readInto(out, d.offset);
  return out;
}

/**
 * A load op: its output is computed from its inputs' bytes (`compute`), or, for an op that only
 * places bytes side by side (a concat along the slowest axis, a stack, a per-expert interleave,
 * each of one type), said as the pieces of its inputs it lays side by side (`join`, e.g. from
 * @compat/tensor-ops' concatPieces or stackPieces). A join's pieces that are ranges of a file
 * are copied by the writer and served by a mount as they are: nothing computed, nothing stored.
 */
export type OpSpec = OpSpecBase &
  (
    | {
        /** Produces exactly tensorByteSize(type, shape) bytes. */
        compute(inputs: OpInput[]): Uint8Array | Promise<Uint8Array>;
        readonly join?: undefined;
      }
    | {
        /** The output: these pieces of the inputs (`part` indexes `inputs`), in order. */
        readonly join: readonly JoinPiece[];
        readonly compute?: undefined;
      }
  );

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

/**
 * The working state of one translation: a draft copy of the source model and the
 * small vocabulary of verbs handlers are written in. Every verb mirrors a helper of
 * the reference (copy/inject/rename KVs, truncate arrays, rename/reshape tensors, hide
 * prefixes, register load ops) and keeps the reference's quirks, e.g. copies never
 * overwrite and renames of missing tensors are silent. Handlers read the draft with the
 * lenient readers (reads.ts: stringKv(t.draft, key), …) or GgufModel's own methods; the
 * derived ops are in ops.ts.
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

  // set and remove
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

  removeKv(key: string): void {
    this.draft.delete(key);
  }

  // copy (never over an existing key)
  /** Copies src to dst with its GGUF type, unless src is missing or dst already exists. */
  copyKv(src: string, dst: string): void {
    if (this.draft.has(dst)) return;
    const kv = this.draft.get(src);
    if (kv === undefined) return;
    this.draft.set(dst, kv.type, kv.value);
  }

  /** copyKv for each [src, dst] pair, in order: a handler's table of keys Ollama named differently. */
  copyKvs(pairs: readonly (readonly [string, string])[]): void {
    for (const [src, dst] of pairs) this.copyKv(src, dst);
  }

  /** copyKv for every key under oldPrefix; the old keys stay (llama.cpp never reads them). */
  copyKvPrefix(oldPrefix: string, newPrefix: string): void {
    for (const key of this.draft.keys()) {
      if (key.startsWith(oldPrefix)) this.copyKv(key, newPrefix + key.slice(oldPrefix.length));
    }
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

  // inject (only where missing)
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

  // cut arrays
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

  // deferred to finish()
  /**
   * When the translation finishes, drops every key that starts with none of `prefixes`
   * (e.g. a clip view keeps only general.* and clip.*). Deferred, so keys set later count.
   */
  keepKeysOnly(prefixes: readonly string[]): void {
    this.keptKeyPrefixes = prefixes.slice();
  }
  // ---- tensors ---------------------------------------------------------------------------

  /** Renames a tensor in place (position and data unchanged); silent when `from` is absent. */
  renameTensor(from: string, to: string): void {
    if (from === to || !this.draft.hasTensor(from)) return;
    if (this.draft.hasTensor(to)) {
      throw new TranslationError("TENSOR_CLASH", `cannot rename "${from}" to "${to}": that name is taken`, this.errorContext(from));
    }
    this.draft.renameTensor(from, to);
  }

  /** Replaces the first occurrence of `needle` in every tensor name that contains it. */
  renameTensorsContaining(needle: string, replacement: string): void {
    for (const name of tensorNames(this.draft)) {
      const at = name.indexOf(needle);
      if (at >= 0) this.renameTensor(name, name.slice(0, at) + replacement + name.slice(at + needle.length));
    }
  }

  /** Renames every tensor whose name ends with `oldSuffix`. */
  renameTensorSuffix(oldSuffix: string, newSuffix: string): void {
    for (const name of tensorNames(this.draft)) {
      if (name.endsWith(oldSuffix)) this.renameTensor(name, name.slice(0, name.length - oldSuffix.length) + newSuffix);
    }
  }

  /**
   * Changes a tensor's shape in the metadata only. Without an op the loader reads the first
   * bytes of the original range, so the new size must not exceed it. A block-quantized tensor
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

  /**
   * The complement of hide: when the translation finishes, every tensor whose final name
   * starts with none of `prefixes` is hidden (a clip view keeps only its tower: v., mm., a.).
   */
  keepOnly(prefixes: readonly string[]): void {
    this.keptTensorPrefixes = prefixes.slice();
  }

  dropTensor(name: string): void {
    if (!this.draft.hasTensor(name)) return;
    this.draft.dropTensor(name);
    this.dropped.push(name);
  }

  // ---- ops -------------------------------------------------------------------------------

  /**
   * Registers a load op: `dest` (created when absent) gets bytes computed from the
   * inputs' bytes. The inputs' data sources are captured now, before later renames.
   */
  op(dest: string, spec: OpSpec): void {
    const captured = spec.inputs.map((name) => {
      const t = this.draft.findTensor(name);
      if (t === undefined) throw new TranslationError("OP_INPUT_MISSING", `op "${spec.label}" for "${dest}" needs tensor "${name}"`, this.errorContext(dest));
      return { name, type: t.type, shape: t.shape.slice(), data: t.data };
    });
    let target = this.draft.findTensor(dest);
    const type = spec.type ?? target?.type;
    const shape = spec.shape?.slice() ?? target?.shape.slice();
    if (type === undefined || shape === undefined) {
      throw new TranslationError("OP_SHAPE", `op "${spec.label}" creates "${dest}" and must give its type and shape`, this.errorContext(dest));
    }
    this.checkWholeBlocks(dest, type, shape);
    const length = tensorByteSize(type, shape);
    const label = spec.label;
    const handler = this.handler;
    const join = spec.join;
    if (join !== undefined) this.checkJoin(dest, label, join, captured, length);
    const parts = join !== undefined ? joinParts(join, captured) : undefined;
    const data: TensorData = {
      kind: "computed",
      length,
      label,
      ...(parts !== undefined ? { parts } : {}),
      inputs: captured.map((c) => c.data),
      async produce() {
        const inputs: OpInput[] = [];
        for (const c of captured) inputs.push({ name: c.name, type: c.type, shape: c.shape, bytes: await readInput(c) });
        let out: Uint8Array;
        try {
          out = join !== undefined ? joinBytes(join, inputs, length) : await spec.compute(inputs);
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
    this.ops.push({ tensor: dest, label, inputs: (spec.sources ?? spec.inputs).slice() });
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
          `tensor "${t.name}" needs ${want} bytes after reshape but its source holds ${have}`,
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

  /** The handler and tensor a TranslationError names (ops.ts builds its errors with it). */
  errorContext(tensor: string): { handler?: string; tensor: string } {
    return this.handler !== undefined ? { handler: this.handler, tensor } : { tensor };
  }

  /** A join's pieces must lie within their inputs and add up to the output (OP_LENGTH when not). */
  private checkJoin(dest: string, label: string, join: readonly JoinPiece[], inputs: readonly { name: string; type: number; shape: readonly number[] }[], length: number): void {
    let total = 0;
    for (const p of join) {
      const input = inputs[p.part];
      const size = input !== undefined ? tensorByteSize(input.type, input.shape) : 0;
      if (input === undefined || p.offset < 0 || p.length < 0 || p.offset + p.length > size) {
        throw new TranslationError("OP_LENGTH", `op "${label}" for "${dest}" joins bytes [${p.offset}, +${p.length}) of input ${p.part}, which has ${size}`, this.errorContext(dest));
      }
      total += p.length;
    }
    if (total !== length) throw new TranslationError("OP_LENGTH", `op "${label}" joins ${total} bytes for "${dest}", expected ${length}`, this.errorContext(dest));
  }

  /** A tensor of `type` may take `shape` only with rows of whole blocks (ggml's row layout). */
  private checkWholeBlocks(name: string, type: number, shape: readonly number[]): void {
    const block = ggmlTypeInfo(type).blockSize;
    const row = shape[0] ?? 1;
    if (row % block === 0) return;
    throw new TranslationError(
      "ROWS_NOT_BLOCKS",
      `"${name}" (${ggmlTypeName(type)}) cannot take shape [${shape.join(", ")}]: rows of ${row} are not whole ${ggmlTypeName(type)} blocks of ${block}`,
      this.errorContext(name),
    );
  }
}

function ggmlTypeName(type: number): string {
  return GgmlType[type] ?? `type ${type}`;
}

/**
 * A join's pieces as ranges of files and bytes in memory, when every input it takes from is one
 * (an input that is itself computed exists only whole: then the join is computed, undefined).
 */
function joinParts(join: readonly JoinPiece[], inputs: readonly { data: TensorData }[]): (RangeData | BytesData)[] | undefined {
  const parts: (RangeData | BytesData)[] = [];
  for (const p of join) {
    const d = inputs[p.part]!.data;
    if (d.kind === "range" && p.offset + p.length <= d.length) parts.push({ kind: "range", source: d.source, offset: d.offset + p.offset, length: p.length });
    else if (d.kind === "bytes" && p.offset + p.length <= d.bytes.length) parts.push({ kind: "bytes", bytes: d.bytes.subarray(p.offset, p.offset + p.length) });
    else return undefined;
  }
  return parts;
}

/** A join's output in memory: its pieces of the inputs' bytes, side by side. */
function joinBytes(join: readonly JoinPiece[], inputs: readonly OpInput[], length: number): Uint8Array {
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of join) {
    out.set(inputs[p.part]!.bytes.subarray(p.offset, p.offset + p.length), at);
    at += p.length;
  }
  return out;
}
