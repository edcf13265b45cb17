/**
 * Writing laid-out files (a translation's text GGUF and mmproj) from a source whose bytes arrive
 * once, in order, as from a download: nothing of the source is ever on disk, and only what an op
 * still needs is in memory.
 *
 * The plan walks each output's layoutGguf extents, the one layout the writer, lazy reads and
 * mounts walk too: the header and in-memory pieces are written at once; a tensor (or a join's
 * piece) that is a range of the source becomes a placement, written where the output wants it as
 * the bytes go by; a tensor an op computes holds the source ranges the op reads (ComputedData
 * `inputs`) until the last of them has arrived, then is computed, written, and its inputs let go.
 * The plan knows, before a byte arrives, the most it will ever hold (peakHeldBytes).
 */
import { GgufError } from "./errors";
import type { GgufLayout } from "./layout";
import type { GgufModel } from "./model";
import type { ByteSource, ComputedData, TensorData } from "./types";

/** One file to write: a model whose tensor data are ranges of (or ops over) the streamed source, and its layout. */
export interface StreamOutput {
  readonly model: GgufModel;
  readonly layout: GgufLayout;
}

/** Where an output's bytes go: positional writes into a file of layout.totalSize bytes that starts as zeros (padding is never written). */
export interface StreamSink {
  write(at: number, bytes: Uint8Array): Promise<void>;
}

/** Source bytes [from, from + length) go to output `output` at `at`. */
interface Placement {
  readonly from: number;
  readonly length: number;
  readonly output: number;
  readonly at: number;
}

/** Bytes known before any source byte: headers, in-memory tensors and pieces. */
interface Literal {
  readonly output: number;
  readonly at: number;
  readonly bytes: Uint8Array;
}

/** A tensor an op computes: ready once the stream has passed `readyAt`, the end of the last source range it reads. */
interface PlannedOp {
  readonly output: number;
  readonly at: number;
  readonly tensor: string;
  readonly data: ComputedData;
  /** Indexes into StreamPlan.held. */
  readonly held: readonly number[];
  readonly readyAt: number;
}

/** A source range held in memory from when the stream reaches `start` until it passes `releaseAt` (the last op reading it is done). */
interface HeldRange {
  readonly start: number;
  readonly end: number;
  readonly releaseAt: number;
}

export interface StreamPlan {
  readonly sourceSize: number;
  readonly placements: readonly Placement[];
  readonly literals: readonly Literal[];
  readonly ops: readonly PlannedOp[];
  readonly held: readonly HeldRange[];
  /** The most source bytes held in memory at once while the source streams in order. */
  readonly peakHeldBytes: number;
  /** The source bytes the most demanding op reads (its inputs, overlapping ranges merged). */
  readonly largestOpInputBytes: number;
  /** Source bytes written somewhere (placements, with repeats). */
  readonly placedBytes: number;
}

/** The source ranges a tensor's data reads (an op's through its declared inputs, recursively). */
function sourceRanges(d: TensorData, source: ByteSource, tensor: string): Array<[number, number]> {
  if (d.kind === "bytes") return [];
  if (d.kind === "range") {
    if (d.source !== source) throw new GgufError("NOT_ARRIVED", `tensor "${tensor}" reads ${d.source.name}, not the streamed ${source.name}`, { source: d.source.name });
    return d.length > 0 ? [[d.offset, d.offset + d.length]] : [];
  }
  if (d.inputs === undefined) throw new GgufError("NOT_ARRIVED", `tensor "${tensor}" is computed by "${d.label}", which does not say what it reads; it cannot be written from a stream`);
  return d.inputs.flatMap((i) => sourceRanges(i, source, tensor));
}

/**
 * Plans writing `outputs` from `source` streamed in order. Throws NOT_ARRIVED when a tensor
 * reads another source or an op does not declare its inputs.
 */
export function planStream(source: ByteSource, outputs: readonly StreamOutput[]): StreamPlan {
  const placements: Placement[] = [];
  const literals: Literal[] = [];
  const opRanges: Array<{ output: number; at: number; tensor: string; data: ComputedData; ranges: Array<[number, number]> }> = [];
  outputs.forEach(({ model, layout }, output) => {
    for (const x of layout.extents) {
      if (x.kind === "header") literals.push({ output, at: x.at, bytes: layout.header });
      if (x.kind !== "tensor" || x.length === 0) continue;
      const t = model.tensors[x.index]!;
      const d = t.data;
      const pieces = d.kind === "computed" ? d.parts : [d];
      if (pieces === undefined) {
        opRanges.push({ output, at: x.at, tensor: t.name, data: d as ComputedData, ranges: sourceRanges(d, source, t.name) });
        continue;
      }
      let at = x.at;
      for (const p of pieces!) {
        if (p.kind === "bytes") {
          literals.push({ output, at, bytes: p.bytes });
          at += p.bytes.length;
        } else {
          sourceRanges(p, source, t.name); // the streamed source, or NOT_ARRIVED
          if (p.length > 0) placements.push({ from: p.offset, length: p.length, output, at });
          at += p.length;
        }
      }
      if (at !== x.at + x.length) throw new GgufError("DATA_LENGTH", `tensor "${t.name}": its pieces hold ${at - x.at} bytes`, { expected: `${x.length} bytes` });
    }
  });
  placements.sort((a, b) => a.from - b.from);

  // the ranges ops read, overlapping ones merged (two ops reading one tensor hold it once)
  const all = opRanges.flatMap((o) => o.ranges).sort((a, b) => a[0] - b[0]);
  const merged: Array<[number, number]> = [];
  for (const [s, e] of all) {
    const last = merged.at(-1);
    if (last !== undefined && s < last[1]) last[1] = Math.max(last[1], e);
    else merged.push([s, e]);
  }
  const indexOf = (s: number): number => {
    let lo = 0;
    let hi = merged.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (merged[mid]![0] <= s) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const releaseAt = merged.map(() => 0);
  let largestOpInputBytes = 0;
  const ops: PlannedOp[] = opRanges.map((o) => {
    const held = [...new Set(o.ranges.map(([s]) => indexOf(s)))].sort((a, b) => a - b);
    const readyAt = Math.max(0, ...held.map((h) => merged[h]![1]));
    for (const h of held) releaseAt[h] = Math.max(releaseAt[h]!, readyAt);
    largestOpInputBytes = Math.max(largestOpInputBytes, held.reduce((s, h) => s + merged[h]![1] - merged[h]![0], 0));
    return { output: o.output, at: o.at, tensor: o.tensor, data: o.data, held, readyAt };
  });
  ops.sort((a, b) => a.readyAt - b.readyAt);
  const held: HeldRange[] = merged.map(([start, end], i) => ({ start, end, releaseAt: releaseAt[i]! }));

  // held bytes over the stream: a range counts from its start, until its last op ran (at the
  // same position, releases come first: the writer runs the ops due there before going on)
  const events = held.flatMap((h) => [
    { at: h.start, delta: h.end - h.start },
    { at: h.releaseAt, delta: -(h.end - h.start) },
  ]);
  events.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let now = 0;
  let peakHeldBytes = 0;
  for (const e of events) {
    now += e.delta;
    peakHeldBytes = Math.max(peakHeldBytes, now);
  }
  const placedBytes = placements.reduce((s, p) => s + p.length, 0);
  return { sourceSize: source.size, placements, literals, ops, held, peakHeldBytes, largestOpInputBytes, placedBytes };
}

/**
 * The source of a model whose bytes are arriving: its header (the bytes parsed before the
 * stream started), and, while a StreamWriter holds them, the ranges ops read. Any other read
 * fails with NOT_ARRIVED (it would be a plan that missed an input).
 */
export class ArrivingSource implements ByteSource {
  /** Set by the StreamWriter fed from this source. */
  heldRead: ((offset: number, length: number) => Uint8Array | undefined) | undefined;

  constructor(
    readonly name: string,
    readonly size: number,
    private readonly head: Uint8Array = new Uint8Array(0),
  ) {}

  async read(offset: number, length: number): Promise<Uint8Array> {
    if (offset + length <= this.head.length) return this.head.slice(offset, offset + length);
    const held = this.heldRead?.(offset, length);
    if (held !== undefined) return held;
    throw new GgufError("NOT_ARRIVED", `bytes ${offset}-${offset + length} of ${this.name} were read before they arrived or after they were let go`, { source: this.name, offset });
  }
}

/**
 * Writes the planned outputs while the source is fed to it in order (`feed`), computing each op
 * as soon as its inputs are there. Never holds more than plan.peakHeldBytes (checked).
 */
export class StreamWriter {
  /** Stream position: every source byte before it was fed. */
  position = 0;
  /** Source bytes held now, and the most held at once so far. */
  heldBytes = 0;
  maxHeldBytes = 0;
  private nextPlacement = 0;
  private nextHeld = 0;
  private nextOp = 0;
  private readonly buffers = new Map<number, Uint8Array>();
  /** Ops not yet run, per held range. */
  private readonly users: number[];
  /** Stream positions where ops become ready (feed splits its chunks there). */
  private readonly cuts: number[];

  constructor(
    readonly plan: StreamPlan,
    private readonly sinks: readonly StreamSink[],
    source?: ArrivingSource,
  ) {
    this.users = plan.held.map(() => 0);
    for (const op of plan.ops) for (const h of op.held) this.users[h]!++;
    this.cuts = [...new Set(plan.ops.map((o) => o.readyAt))].sort((a, b) => a - b);
    if (source !== undefined) source.heldRead = (offset, length) => this.readHeld(offset, length);
  }

  /** Writes what is known before any source byte (headers, in-memory pieces) and runs ops that read nothing. */
  async start(): Promise<void> {
    for (const l of this.plan.literals) await this.sinks[l.output]!.write(l.at, l.bytes);
    await this.runReadyOps();
  }

  /** The next source bytes, at `offset` = position. */
  async feed(offset: number, bytes: Uint8Array): Promise<void> {
    if (offset !== this.position) throw new GgufError("NOT_ARRIVED", `stream fed at ${offset}, expected ${this.position}`, { offset });
    if (offset + bytes.length > this.plan.sourceSize) throw new GgufError("DATA_LENGTH", `stream fed past its end (${offset + bytes.length})`, { expected: `${this.plan.sourceSize} bytes` });
    let from = 0;
    while (from < bytes.length) {
      // up to the next position where ops become ready, so they run (and let go) before more is held
      const cut = this.cuts.find((c) => c > this.position);
      const to = cut === undefined ? bytes.length : Math.min(bytes.length, cut - offset);
      await this.take(offset + from, bytes.subarray(from, to));
      from = to;
    }
  }

  /**
   * Whether nothing of the source is held: every op reading bytes before `position` ran. A
   * stream stopped here (its writes flushed) can be continued by another writer (resumeAt).
   */
  get settled(): boolean {
    return this.heldBytes === 0;
  }

  /**
   * Continues a stream an earlier writer of the same plan left `settled` at `position`, its
   * writes flushed: what the bytes before it place or compute is not written again. Call it
   * before start() (which writes the headers again, the same bytes).
   */
  resumeAt(position: number): void {
    if (this.position !== 0 || position < 0 || position > this.plan.sourceSize) throw new GgufError("NOT_ARRIVED", `internal: cannot resume at ${position}`, { offset: position });
    const { placements, held, ops } = this.plan;
    if (held.some((h) => h.start < position && h.releaseAt > position)) throw new GgufError("NOT_ARRIVED", `internal: an op's inputs straddle ${position}; the stream cannot continue there`, { offset: position });
    while (this.nextPlacement < placements.length && placements[this.nextPlacement]!.from + placements[this.nextPlacement]!.length <= position) this.nextPlacement++;
    while (this.nextHeld < held.length && held[this.nextHeld]!.start < position) this.nextHeld++;
    while (this.nextOp < ops.length && ops[this.nextOp]!.readyAt <= position) this.nextOp++;
    this.position = position;
  }

  /** Whether every source byte arrived and every op ran. */
  get done(): boolean {
    return this.position === this.plan.sourceSize && this.nextOp === this.plan.ops.length;
  }

  private async take(start: number, bytes: Uint8Array): Promise<void> {
    const end = start + bytes.length;
    const { placements, held } = this.plan;
    for (let i = this.nextPlacement; i < placements.length && placements[i]!.from < end; i++) {
      const p = placements[i]!;
      const a = Math.max(start, p.from);
      const b = Math.min(end, p.from + p.length);
      if (b > a) await this.sinks[p.output]!.write(p.at + a - p.from, bytes.subarray(a - start, b - start));
    }
    while (this.nextPlacement < placements.length && placements[this.nextPlacement]!.from + placements[this.nextPlacement]!.length <= end) this.nextPlacement++;
    while (this.nextHeld < held.length && held[this.nextHeld]!.start < end) {
      const h = held[this.nextHeld]!;
      this.buffers.set(this.nextHeld++, new Uint8Array(h.end - h.start));
      this.heldBytes += h.end - h.start;
      this.maxHeldBytes = Math.max(this.maxHeldBytes, this.heldBytes);
      if (this.heldBytes > this.plan.peakHeldBytes) throw new GgufError("DATA_LENGTH", `internal: holding ${this.heldBytes} bytes, the plan said at most ${this.plan.peakHeldBytes}`);
    }
    for (const [i, buf] of this.buffers) {
      const h = held[i]!;
      const a = Math.max(start, h.start);
      const b = Math.min(end, h.end);
      if (b > a) buf.set(bytes.subarray(a - start, b - start), a - h.start);
    }
    this.position = end;
    await this.runReadyOps();
  }

  private async runReadyOps(): Promise<void> {
    const { ops, held } = this.plan;
    while (this.nextOp < ops.length && ops[this.nextOp]!.readyAt <= this.position) {
      const op = ops[this.nextOp++]!;
      const out = await op.data.produce();
      if (out.length !== op.data.length) throw new GgufError("DATA_LENGTH", `op "${op.data.label}" for "${op.tensor}" produced ${out.length} bytes`, { expected: `${op.data.length} bytes` });
      await this.sinks[op.output]!.write(op.at, out);
      for (const h of op.held) {
        if (--this.users[h]! > 0) continue;
        this.buffers.delete(h);
        this.heldBytes -= held[h]!.end - held[h]!.start;
      }
    }
  }

  private readHeld(offset: number, length: number): Uint8Array | undefined {
    for (const [i, buf] of this.buffers) {
      const h = this.plan.held[i]!;
      // a copy: an op may work in its input's bytes, and another op may read the same range
      if (offset >= h.start && offset + length <= h.end && offset + length <= this.position) return buf.slice(offset - h.start, offset - h.start + length);
    }
    return undefined;
  }
}
