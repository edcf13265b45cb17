import { extentsCovering, layoutGguf, readTensorData, writeGguf, type BytesData, type GgufLayout, type GgufModel, type GgufTensor, type RangeData, type WriteOptions } from "@compat/gguf";
import { kernelRangeCopier } from "@compat/files";
import { alignedBytes, nativeFileCopy } from "@compat/tensor-ops";
import type { TranslationReport } from "./report";

/**
 * The translated file, never materialized as a whole: metadata in memory, and per
 * tensor either a byte range of the source or an op over source ranges. At most one
 * op's output is held at a time (a single-slot cache, as the reference keeps for
 * llama-quantize's tensor-by-tensor reads).
 */
export class TranslatedView {
  private layoutCache: GgufLayout | undefined;
  private slot: { tensor: GgufTensor; bytes: Uint8Array } | undefined;

  constructor(
    /** The translated model: what llama.cpp will read. */
    readonly model: GgufModel,
    readonly report: TranslationReport,
    /** The model it was translated from (its file is never written). */
    readonly source: GgufModel,
  ) {}

  /**
   * Where header and tensors sit in the virtual output file; read() and writeTo() share it.
   * Laid out so that untouched source ranges keep their place within a filesystem block
   * (a padding key after the others): XFS and Btrfs then share those extents with the source.
   */
  get layout(): GgufLayout {
    return (this.layoutCache ??= layoutGguf(this.model, { shareBlocks: true }));
  }

  /** Byte size of the virtual output file. */
  get size(): number {
    return this.layout.totalSize;
  }

  /** Any byte range of the virtual output file (clamped to its end). */
  async read(offset: number, length: number): Promise<Uint8Array> {
    if (!Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length < 0) {
      throw new RangeError(`read(${offset}, ${length}): offset and length must be non-negative integers`);
    }
    const layout = this.layout;
    const end = Math.min(offset + length, layout.totalSize);
    const out = new Uint8Array(Math.max(0, end - offset));
    if (out.length === 0) return out;
    for (const x of extentsCovering(layout, offset, end)) {
      const from = Math.max(offset, x.at);
      const to = Math.min(end, x.at + x.length);
      if (to <= from || x.kind === "padding") continue; // padding: the zeros `out` starts with
      const part = x.kind === "header" ? layout.header.subarray(from, to) : await this.tensorSlice(this.model.tensors[x.index]!, from - x.at, to - from);
      out.set(part, from - offset);
    }
    return out;
  }

  /** Releases the source file this view reads from (when translate() opened it). */
  async close(): Promise<void> {
    this.slot = undefined;
    await this.source.close();
  }

  /**
   * Writes the translated file atomically (temp file + rename), one tensor in memory at a time.
   * With the native addon, untouched tensor ranges are copied in the kernel (copy_file_range,
   * shared extents on XFS and Btrfs), and on ext4 the file is written with O_DIRECT in aligned
   * blocks instead (@compat/files' writeFileAtomic).
   */
  async writeTo(path: string, opts?: WriteOptions): Promise<void> {
    const copyRange = opts?.copyRange ?? kernelRangeCopier(nativeFileCopy());
    await writeGguf(this.model, path, { alignedBytes, ...opts, layout: this.layout, ...(copyRange !== undefined ? { copyRange } : {}) });
  }

  private async tensorSlice(t: GgufTensor, at: number, length: number): Promise<Uint8Array> {
    const d = t.data;
    if (d.kind === "range") return d.source.read(d.offset + at, length);
    if (d.kind === "bytes") return d.bytes.subarray(at, at + length);
    if (d.parts !== undefined) return readParts(d.parts, at, length); // a join: only the pieces asked for
    if (this.slot?.tensor !== t) {
      this.slot = undefined; // release the previous output before computing the next
      this.slot = { tensor: t, bytes: await readTensorData(t) };
    }
    return this.slot.bytes.subarray(at, at + length);
  }
}

/** Bytes [at, at + length) of the pieces of a join laid side by side. */
async function readParts(parts: readonly (RangeData | BytesData)[], at: number, length: number): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  let pos = 0;
  for (const part of parts) {
    const size = part.kind === "range" ? part.length : part.bytes.length;
    const from = Math.max(at, pos);
    const to = Math.min(at + length, pos + size);
    if (to > from) out.set(part.kind === "range" ? await part.source.read(part.offset + from - pos, to - from) : part.bytes.subarray(from - pos, to - pos), from - at);
    pos += size;
    if (pos >= at + length) break;
  }
  return out;
}
