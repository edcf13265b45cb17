import { GgufError } from "./errors";
import { ByteWriter, writeKv } from "./encode";
import type { GgufModel } from "./model";
import { checkTensor } from "./model";
import { alignUp } from "./parse";

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
}

/**
 * Compute the exact bytes of the header and where each tensor goes. Like llama.cpp's
 * gguf_write_out: tensors are contiguous in info order, each padded to the alignment
 * (the last one too), and the header is padded even when there are no tensors (unless
 * model.padEmptyHeader is false, as for gguf-py's vocab-only files).
 */
export function layoutGguf(model: GgufModel): GgufLayout {
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

  const w = new ByteWriter(model.littleEndian);
  w.bytes(new Uint8Array([0x47, 0x47, 0x55, 0x46]));
  w.u32(model.version);
  w.u64n(tensors.length);
  w.u64n(model.kvCount);
  for (const kv of model) writeKv(w, kv);
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    w.string(t.name);
    w.u32(t.shape.length);
    for (const d of t.shape) w.u64n(d);
    w.i32(t.type);
    w.u64n(tensorOffsets[i]!);
  }
  if (tensors.length > 0 || model.padEmptyHeader) w.padTo(alignment);
  const header = w.result();
  return { header, dataOffset: header.length, tensorOffsets, tensorSizes, alignment, totalSize: header.length + next };
}
