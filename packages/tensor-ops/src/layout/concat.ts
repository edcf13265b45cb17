/**
 * Concatenation and splitting along any axis, and the per-expert gate/up fusion built on them.
 * Along axis >= 1 rows move as opaque byte runs, so any ggml type works; along axis 0 the parts'
 * row lengths must each be whole blocks.
 */
import { ArgumentError, ShapeError } from "../errors";
import {
  checkAxis,
  checkTensor,
  formatOf,
  padShape,
  product,
  rowBytes,
  type Dtype,
  type Format,
  type Shape,
  type TensorBytes,
} from "./tensor";

/** Bytes of one step along `axis` for the dims below it, for a part of this shape. */
function slabBytes(format: Format, shape: Shape, axis: number): number {
  return rowBytes(format, shape[0] as number) * product(shape, 1, axis + 1);
}

/** One piece of a join's output: `length` bytes of part `part`, from byte `offset` of it. */
export interface JoinPiece {
  readonly part: number;
  readonly offset: number;
  readonly length: number;
}

/** How parts of these shapes join along `axis`: the output shape, each part's slab per outer step, the outer steps. */
function joinGeometry(shapes: readonly Shape[], format: Format, axis: number | undefined): { shape: number[]; slabs: number[]; outer: number } {
  if (shapes.length === 0) throw new ArgumentError("concat needs at least one part");
  const rank = Math.max(...shapes.map((s) => s.length), (axis ?? 0) + 1);
  const ax = axis ?? rank - 1;
  checkAxis(ax, rank);
  const padded = shapes.map((s) => padShape(s, rank));
  const first = padded[0] as number[];
  for (const [i, s] of padded.entries()) {
    for (let d = 0; d < rank; d++) {
      if (d !== ax && s[d] !== first[d]) {
        throw new ShapeError(`concat part ${i} has shape [${s.join(", ")}], incompatible with [${first.join(", ")}] along axis ${ax}`);
      }
    }
  }
  const shape = [...first];
  shape[ax] = padded.reduce((sum, s) => sum + (s[ax] as number), 0);
  return { shape, slabs: padded.map((s) => slabBytes(format, s, ax)), outer: product(first, ax + 1) };
}

/**
 * Joins tensors along `axis` (default: the slowest axis of the highest-rank part). All other
 * dimensions must agree. Returns a new tensor; inputs are not modified.
 */
export function concat(parts: readonly TensorBytes[], dtype: Dtype, axis?: number): TensorBytes {
  if (parts.length === 0) throw new ArgumentError("concat needs at least one part");
  const format = formatOf(dtype);
  for (const [i, p] of parts.entries()) checkTensor(p, format, `concat part ${i}`);
  const { shape, slabs, outer } = joinGeometry(parts.map((p) => p.shape), format, axis);
  const total = slabs.reduce((a, b) => a + b, 0) * outer;
  const out = new Uint8Array(total);
  let at = 0;
  for (let o = 0; o < outer; o++) {
    for (let p = 0; p < parts.length; p++) {
      const size = slabs[p] as number;
      out.set((parts[p] as TensorBytes).data.subarray(o * size, (o + 1) * size), at);
      at += size;
    }
  }
  return { data: out, shape };
}

/**
 * concat's output described without its bytes: the pieces of the parts (by shape) that, laid
 * side by side in order, are `concat(parts, dtype, axis).data` (pieces of no bytes left out,
 * consecutive pieces of one part merged). A join along the slowest axis is one piece per part;
 * along a faster one, one per part and outer step: undefined when that is more than `maxPieces`.
 */
export function concatPieces(shapes: readonly Shape[], dtype: Dtype, axis?: number, maxPieces = Infinity): { shape: number[]; pieces: JoinPiece[] } | undefined {
  const { shape, slabs, outer } = joinGeometry(shapes, formatOf(dtype), axis);
  const live = slabs.filter((n) => n > 0).length;
  if (live > 1 && outer * live > maxPieces) return undefined;
  const pieces: JoinPiece[] = [];
  for (let o = 0; o < outer; o++) {
    for (let part = 0; part < slabs.length; part++) {
      const length = slabs[part] as number;
      if (length === 0) continue;
      const last = pieces[pieces.length - 1];
      if (last !== undefined && last.part === part && last.offset + last.length === o * length) pieces[pieces.length - 1] = { part, offset: last.offset, length: last.length + length };
      else pieces.push({ part, offset: o * length, length });
    }
  }
  return { shape, pieces };
}

/** stack's output as pieces (see concatPieces): part i whole, in order. */
export function stackPieces(shapes: readonly Shape[], dtype: Dtype): { shape: number[]; pieces: JoinPiece[] } {
  const shape = shapes[0];
  if (shape === undefined) throw new ArgumentError("stack needs at least one part");
  for (const [i, s] of shapes.entries()) {
    if (s.length !== shape.length || s.some((d, k) => d !== shape[k])) throw new ShapeError(`stack part ${i} has shape [${s.join(", ")}], expected [${shape.join(", ")}]`);
  }
  return concatPieces(shapes.map((s) => [...s, 1]), dtype, shape.length)!;
}

/**
 * Splits a tensor along `axis` into consecutive pieces of the given sizes (which must sum to the
 * axis length). Exact inverse of `concat` on the same axis.
 */
export function split(t: TensorBytes, dtype: Dtype, axis: number, sizes: readonly number[]): TensorBytes[] {
  const format = formatOf(dtype);
  checkTensor(t, format);
  checkAxis(axis, t.shape.length);
  const total = sizes.reduce((a, b) => a + b, 0);
  if (sizes.some((n) => !Number.isSafeInteger(n) || n < 0) || total !== t.shape[axis]) {
    throw new ShapeError(`split sizes [${sizes.join(", ")}] do not add up to ${String(t.shape[axis])} along axis ${axis}`);
  }
  const shapes = sizes.map((n) => {
    const s = [...t.shape];
    s[axis] = n;
    return s;
  });
  const slabs = shapes.map((s) => slabBytes(format, s, axis));
  const slabTotal = slabs.reduce((a, b) => a + b, 0);
  const outer = product(t.shape, axis + 1);
  const outs = slabs.map((size) => new Uint8Array(size * outer));
  for (let o = 0; o < outer; o++) {
    let at = o * slabTotal;
    for (let p = 0; p < sizes.length; p++) {
      const size = slabs[p] as number;
      (outs[p] as Uint8Array).set(t.data.subarray(at, at + size), o * size);
      at += size;
    }
  }
  return outs.map((data, i) => ({ data, shape: shapes[i] as number[] }));
}

/** Keeps the first `n` entries along the slowest axis (e.g. truncating a vocabulary). */
export function truncateRows(t: TensorBytes, dtype: Dtype, n: number): TensorBytes {
  const format = formatOf(dtype);
  checkTensor(t, format);
  const last = t.shape.length - 1;
  const have = t.shape[last] as number;
  if (!Number.isSafeInteger(n) || n < 0 || n > have) throw new ShapeError(`cannot keep ${String(n)} of ${have} rows`);
  const shape = [...t.shape];
  shape[last] = n;
  const bytes = (t.data.byteLength / (have || 1)) * n;
  return { data: t.data.slice(0, have === 0 ? 0 : bytes), shape };
}

/** Extends `axis` to `size` entries, filling the new ones with zero bytes (0.0 for every ggml type). */
export function padAxis(t: TensorBytes, dtype: Dtype, axis: number, size: number): TensorBytes {
  checkAxis(axis, t.shape.length);
  const have = t.shape[axis] as number;
  if (!Number.isSafeInteger(size) || size < have) throw new ShapeError(`cannot pad axis ${axis} from ${have} down to ${String(size)}`);
  if (size === have) {
    checkTensor(t, formatOf(dtype));
    return { data: t.data.slice(), shape: [...t.shape] };
  }
  const zshape = [...t.shape];
  zshape[axis] = size - have;
  const format = formatOf(dtype);
  const zeros = { data: new Uint8Array(rowBytes(format, zshape[0] as number) * product(zshape, 1)), shape: zshape };
  return concat([t, zeros], dtype, axis);
}

/** Zero rows appended along the slowest axis until it has `rows` entries. */
export function padRows(t: TensorBytes, dtype: Dtype, rows: number): TensorBytes {
  return padAxis(t, dtype, t.shape.length - 1, rows);
}

/** A zero-filled tensor of the given shape (all-zero bytes decode to 0.0 in every ggml type). */
export function zeros(shape: Shape, dtype: Dtype): TensorBytes {
  const format = formatOf(dtype);
  const s = [...shape];
  return { data: new Uint8Array(rowBytes(format, s[0] as number) * product(s, 1)), shape: s };
}

/**
 * Fuses per-expert gate and up projections into llama.cpp's ffn_gate_up_exps layout: shapes
 * [n_embd, n_ff, n_expert] each -> [n_embd, 2*n_ff, n_expert], where expert e's slab holds its n_ff
 * gate rows followed by its n_ff up rows (llama-graph takes the gate half first).
 */
export function interleaveExperts(gate: TensorBytes, up: TensorBytes, dtype: Dtype): TensorBytes {
  if (gate.shape.length < 2 || up.shape.length < 2) throw new ShapeError("expert tensors need at least 2 dimensions");
  return concat([gate, up], dtype, 1);
}

/** Inverse of `interleaveExperts`: splits ffn_gate_up_exps back into gate and up. */
export function deinterleaveExperts(fused: TensorBytes, dtype: Dtype): { gate: TensorBytes; up: TensorBytes } {
  const rows = fused.shape[1];
  if (rows === undefined || rows % 2 !== 0) throw new ShapeError(`fused gate_up needs an even ne[1], got ${String(rows)}`);
  const [gate, up] = split(fused, dtype, 1, [rows / 2, rows / 2]) as [TensorBytes, TensorBytes];
  return { gate, up };
}

/**
 * Stacks equally shaped tensors along a new slowest axis: n parts of shape [a, b] give
 * [a, b, n], part i being slab i (how per-expert matrices become one *_exps tensor).
 * Rows move as opaque bytes, so any ggml type works.
 */
export function stack(parts: readonly TensorBytes[], dtype: Dtype): TensorBytes {
  if (parts.length === 0) throw new ArgumentError("stack needs at least one part");
  const shape = (parts[0] as TensorBytes).shape;
  for (const [i, p] of parts.entries()) {
    if (p.shape.length !== shape.length || p.shape.some((d, k) => d !== shape[k])) {
      throw new ShapeError(`stack part ${i} has shape [${p.shape.join(", ")}], expected [${shape.join(", ")}]`);
    }
  }
  return concat(parts.map((p) => ({ data: p.data, shape: [...shape, 1] })), dtype, shape.length);
}
