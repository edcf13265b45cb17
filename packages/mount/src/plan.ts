import { fstat } from "node:fs";
import { promisify } from "node:util";
import type { ByteSource, BytesData, GgufLayout, GgufModel, GgufTensor, RangeData } from "@compat/gguf";
import { MountError } from "./errors";

/** A file the daemon reads ranges of, as it was when the plan was made (a read checks it still is). */
export interface SourceFile {
  path: string;
  dev: bigint;
  ino: bigint;
  size: number;
  mtimeNs: bigint;
}

/** A file of computed bytes (an op tensor's output), written on first read. */
export interface Sidecar {
  path: string;
  length: number;
}

/**
 * One piece of a virtual file at its offset `at` in it, in file order; together they cover it
 * exactly (the daemon checks they tile the file and serves them as they are).
 */
export type Extent =
  | { kind: "zero"; at: number; length: number }
  /** Bytes of the plan's `memory` (the header, small in-memory tensors). */
  | { kind: "memory"; at: number; offset: number; length: number }
  | { kind: "source"; at: number; source: number; offset: number; length: number }
  | { kind: "sidecar"; at: number; sidecar: number; offset: number; length: number };

/** A virtual file as the daemon serves it. */
export interface FilePlan {
  size: number;
  mtimeNs: bigint;
  memory: Uint8Array;
  sources: SourceFile[];
  sidecars: Sidecar[];
  extents: Extent[];
}

/** How to write one sidecar: `produce` returns exactly `length` bytes. */
export interface ComputedPart extends Sidecar {
  /** The tensor it holds: its index and name in the view's model. */
  tensor: { index: number; name: string };
  label: string;
  produce(): Promise<Uint8Array>;
}

/** What planView needs of a TranslatedView (@compat/handlers). */
export interface PlannableView {
  readonly model: GgufModel;
  readonly layout: GgufLayout;
}

export interface PlanOptions {
  /** Where the output of tensor `index` (computed data) is kept: a content-addressed path. */
  sidecarPath(tensor: GgufTensor, index: number): string;
}

const fstatBig = promisify(fstat);

/** The identity of an open file source (its fd: exactly the file that was parsed). */
async function sourceFile(src: ByteSource): Promise<SourceFile> {
  if (src.fd === undefined) {
    throw new MountError("BAD_PLAN", `${src.name}: a mounted file can only read ranges of local files (this source has no file descriptor)`, { source: src.name });
  }
  const st = await fstatBig(src.fd, { bigint: true });
  return { path: src.name, dev: st.dev, ino: st.ino, size: Number(st.size), mtimeNs: st.mtimeNs };
}

/**
 * The plan of a translated view, one extent of the mount per extent of its layout: the header
 * from memory, every untouched tensor as a range of its source file (adjacent ranges merged),
 * padding as zeros, an op that only joins bytes as the ranges it joins, and each other
 * computed tensor as a sidecar file (`computed` says how to write it). The bytes it describes are exactly `view.read()`'s, i.e. `writeTo()`'s.
 */
export async function planView(view: PlannableView, opts: PlanOptions): Promise<{ plan: FilePlan; computed: ComputedPart[] }> {
  const { header, totalSize, extents: layout } = view.layout;
  const sources: SourceFile[] = [];
  const sourceIndex = new Map<ByteSource, number>();
  const sidecars: Sidecar[] = [];
  const computed: ComputedPart[] = [];
  const memoryParts: Uint8Array[] = [header];
  let memorySize = header.length;
  const extents: Extent[] = [];
  let at = 0;

  const push = (x: Extent) => {
    if (x.at !== at) throw new MountError("BAD_PLAN", `internal: an extent at ${x.at} follows one that ends at ${at}`);
    const last = extents[extents.length - 1];
    if (last?.kind === "zero" && x.kind === "zero") last.length += x.length;
    else if (last?.kind === "memory" && x.kind === "memory" && last.offset + last.length === x.offset) last.length += x.length;
    else if (last?.kind === "source" && x.kind === "source" && last.source === x.source && last.offset + last.length === x.offset) last.length += x.length;
    else extents.push(x);
    at += x.length;
  };

  /** A range of a source file, or bytes kept in memory, at `at` in the file. */
  const place = async (d: RangeData | BytesData, at: number, tensor: string) => {
    if (d.kind === "bytes") {
      memoryParts.push(d.bytes);
      push({ kind: "memory", at, offset: memorySize, length: d.bytes.length });
      memorySize += d.bytes.length;
      return;
    }
    let s = sourceIndex.get(d.source);
    if (s === undefined) {
      s = sources.push(await sourceFile(d.source)) - 1;
      sourceIndex.set(d.source, s);
    }
    if (d.offset + d.length > sources[s]!.size) {
      throw new MountError("BAD_PLAN", `tensor "${tensor}" reads [${d.offset}, +${d.length}) of ${d.source.name}, which has ${sources[s]!.size} bytes`, { source: d.source.name, tensor });
    }
    push({ kind: "source", at, source: s, offset: d.offset, length: d.length });
  };

  for (const x of layout) {
    if (x.kind === "header") push({ kind: "memory", at: x.at, offset: 0, length: x.length });
    else if (x.kind === "padding") push({ kind: "zero", at: x.at, length: x.length });
    else if (x.length > 0) {
      const t = view.model.tensors[x.index]!;
      const d = t.data;
      if (d.kind === "range") await place({ ...d, length: x.length }, x.at, t.name);
      else if (d.kind === "bytes") await place({ kind: "bytes", bytes: d.bytes.subarray(0, x.length) }, x.at, t.name);
      else if (d.parts !== undefined) {
        // an op that only joins bytes: its pieces, served from where they are (nothing computed)
        let pos = x.at;
        for (const part of d.parts) {
          await place(part, pos, t.name);
          pos += part.kind === "range" ? part.length : part.bytes.length;
        }
        if (pos !== x.at + x.length) throw new MountError("BAD_PLAN", `tensor "${t.name}": its pieces hold ${pos - x.at} bytes, the tensor ${x.length}`, { tensor: t.name });
      } else {
        const path = opts.sidecarPath(t, x.index);
        const sidecar = sidecars.push({ path, length: x.length }) - 1;
        computed.push({ path, length: x.length, tensor: { index: x.index, name: t.name }, label: `${t.name} (${d.label})`, produce: () => d.produce() });
        push({ kind: "sidecar", at: x.at, sidecar, offset: 0, length: x.length });
      }
    }
  }
  if (at !== totalSize) throw new MountError("BAD_PLAN", `the plan covers ${at} bytes of a ${totalSize}-byte file`);
  const memory = memoryParts.length === 1 ? header : Buffer.concat(memoryParts);
  const mtimeNs = sources.reduce((m, s) => (s.mtimeNs > m ? s.mtimeNs : m), 0n);
  return { plan: { size: totalSize, mtimeNs, memory, sources, sidecars, extents }, computed };
}
