import { GgufError } from "./errors";
import { ByteWriter, writeKv } from "./encode";
import type { GgufModel } from "./model";
import { GgufValueType } from "./types";
import { checkTensor } from "./model";
import { alignUp } from "./parse";

/**
 * One piece of a laid-out file at its absolute offset `at`. In file order the extents cover the
 * file exactly: the header (with its alignment padding), then per tensor its bytes and, when it
 * does not end on the alignment, zero padding. A tensor of no bytes has an extent of length 0.
 */
export type LayoutExtent =
  | { readonly kind: "header"; readonly at: number; readonly length: number }
  | { readonly kind: "tensor"; readonly at: number; readonly length: number; /** Its index in model.tensors. */ readonly index: number }
  | { readonly kind: "padding"; readonly at: number; readonly length: number };

/**
 * Where everything of a GGUF file sits: the one description its writer (writeGguf), lazy reads
 * (@compat/handlers' TranslatedView.read) and mount plans (@compat/mount's planView) all walk.
 */
export interface GgufLayout {
  /** Magic through tensor infos, zero-padded to the alignment. */
  header: Uint8Array;
  /** Absolute offset of the data section (= header.length). */
  dataOffset: number;
  /** Per tensor, offset relative to dataOffset. */
  tensorOffsets: number[];
  /** Per tensor, exact byte size (without padding). */
  tensorSizes: number[];
  alignment: number;
  /** Size of the whole file. */
  totalSize: number;
  /** The file as header, tensor and padding extents, in order (see extentsCovering for a range of it). */
  extents: readonly LayoutExtent[];
}

/**
 * The extents that hold bytes of [start, end) of the file, in order, found by binary search
 * (tensors of no bytes inside the range are included; they hold nothing).
 */
export function extentsCovering(layout: Pick<GgufLayout, "extents">, start: number, end: number): readonly LayoutExtent[] {
  const ex = layout.extents;
  let lo = 0;
  let hi = ex.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ex[mid]!.at + ex[mid]!.length <= start) lo = mid + 1;
    else hi = mid;
  }
  let last = lo;
  while (last < ex.length && ex[last]!.at < end) last++;
  return ex.slice(lo, last);
}

/** The header, tensor and padding extents of a file laid out with these parts. */
function extentsOf(headerLength: number, tensorOffsets: readonly number[], tensorSizes: readonly number[], totalSize: number): LayoutExtent[] {
  const out: LayoutExtent[] = [{ kind: "header", at: 0, length: headerLength }];
  let at = headerLength;
  tensorOffsets.forEach((offset, index) => {
    const start = headerLength + offset;
    if (start > at) out.push({ kind: "padding", at, length: start - at });
    out.push({ kind: "tensor", at: start, length: tensorSizes[index]!, index });
    at = start + tensorSizes[index]!;
  });
  if (totalSize > at) out.push({ kind: "padding", at, length: totalSize - at });
  return out;
}

/**
 * The key of the padding entry layoutGguf adds with `shareBlocks` (an array of zero bytes that
 * no loader reads; llama.cpp keeps unknown keys and ignores them).
 */
export const PADDING_KEY = "ollama_compat.padding";

/** Filesystem block size extents are shared in (XFS's and Btrfs' default; larger blocks are multiples of it). */
export const SHARE_BLOCK = 4096;

export interface LayoutOptions {
  /**
   * Start the data section where most bytes of tensors that are untouched ranges of a file keep
   * their offset within a SHARE_BLOCK-byte block, by adding a PADDING_KEY entry after the other
   * keys (its length is chosen; any such entry in the model is replaced). A filesystem that can
   * share extents (XFS, Btrfs: copy_file_range reflinks) then shares those ranges instead of
   * copying them. No entry is added when the natural layout already agrees (an unchanged model).
   */
  shareBlocks?: boolean;
}

/**
 * Compute the exact bytes of the header and where each tensor goes. Like llama.cpp's
 * gguf_write_out: tensors are contiguous in info order, each padded to the alignment
 * (the last one too), and the header is padded even when there are no tensors (unless
 * model.padEmptyHeader is false, as for gguf-py's vocab-only files).
 */
export function layoutGguf(model: GgufModel, opts: LayoutOptions = {}): GgufLayout {
  const alignment = model.alignment;
  if (alignment === 0 || (alignment & (alignment - 1)) !== 0) {
    throw new GgufError("BAD_ALIGNMENT", `alignment ${alignment} is not a power of two`);
  }
  if (model.version !== 2 && model.version !== 3) {
    throw new GgufError("UNSUPPORTED_VERSION", `cannot write GGUF version ${model.version}`, { expected: "2 or 3" });
  }
  const tensors = model.tensors;
  const names = new Set<string>();
  const tensorSizes: number[] = [];
  const tensorOffsets: number[] = [];
  let next = 0;
  for (const t of tensors) {
    if (names.has(t.name)) throw new GgufError("DUPLICATE_TENSOR", `duplicate tensor name "${t.name}"`);
    names.add(t.name);
    const size = checkTensor(t);
    tensorSizes.push(size);
    tensorOffsets.push(next);
    next = alignUp(next + size, alignment);
    if (next > Number.MAX_SAFE_INTEGER) throw new GgufError("SHAPE_OVERFLOW", "total tensor data exceeds 2^53-1 bytes");
  }

  const share = opts.shareBlocks === true;
  const le = model.littleEndian;
  const w = new ByteWriter(le);
  w.bytes(new Uint8Array([0x47, 0x47, 0x55, 0x46]));
  w.u32(model.version);
  w.u64n(tensors.length);
  const kvCountAt = w.pos;
  w.u64n(0); // the key count, written below
  let kvCount = 0;
  for (const kv of model) {
    if (share && kv.key === PADDING_KEY) continue;
    writeKv(w, kv);
    kvCount++;
  }
  const infos = new ByteWriter(le, 1 << 12);
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    infos.string(t.name);
    infos.u32(t.shape.length);
    for (const d of t.shape) infos.u64n(d);
    infos.i32(t.type);
    infos.u64n(tensorOffsets[i]!);
  }
  const natural = w.pos + infos.pos;
  const padded = tensors.length > 0 || model.padEmptyHeader;
  if (share && padded) {
    const want = sharedResidue(model, tensorOffsets, alignment);
    if (want !== undefined && alignUp(natural, alignment) % SHARE_BLOCK !== want) {
      const min = natural + 8 + PADDING_KEY.length + 4 + 4 + 8; // + key, ARRAY, UINT8, count
      const n = (((want - min) % SHARE_BLOCK) + SHARE_BLOCK) % SHARE_BLOCK;
      w.string(PADDING_KEY);
      w.u32(GgufValueType.ARRAY);
      w.u32(GgufValueType.UINT8);
      w.u64n(n);
      w.bytes(new Uint8Array(n));
      kvCount++;
    }
  }
  const end = w.pos;
  w.pos = kvCountAt;
  w.u64n(kvCount);
  w.pos = end;
  w.bytes(infos.buf.subarray(0, infos.pos));
  if (padded) w.padTo(alignment);
  const header = w.result();
  const totalSize = header.length + next;
  const extents = extentsOf(header.length, tensorOffsets, tensorSizes, totalSize);
  return { header, dataOffset: header.length, tensorOffsets, tensorSizes, alignment, totalSize, extents };
}

/**
 * The data-section start modulo SHARE_BLOCK that keeps the most bytes of file-range tensors
 * at their offset within a block (undefined when no tensor can gain: none, or all too small).
 */
function sharedResidue(model: GgufModel, tensorOffsets: readonly number[], alignment: number): number | undefined {
  if (alignment >= SHARE_BLOCK) return undefined; // the data section starts on a block boundary anyway
  const weight = new Map<number, number>();
  model.tensors.forEach((t, i) => {
    const d = t.data;
    if (d.kind !== "range" || d.length < SHARE_BLOCK) return;
    const r = (((d.offset - tensorOffsets[i]!) % SHARE_BLOCK) + SHARE_BLOCK) % SHARE_BLOCK;
    if (r % alignment === 0) weight.set(r, (weight.get(r) ?? 0) + d.length);
  });
  let best: number | undefined;
  let bestWeight = 0;
  for (const [r, w] of [...weight].sort((a, b) => a[0] - b[0])) {
    if (w > bestWeight) [best, bestWeight] = [r, w];
  }
  return best;
}
