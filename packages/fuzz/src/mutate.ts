/**
 * Seeded mutations of corpus files. Input number `index` of a run with `seed` is a pure
 * function of (corpus, seed, index), so any failing input is reproduced from those two
 * numbers alone (the recipe printed with it names the file and the operations).
 */
import { Prng, hash32 } from "@compat/testkit";
import { pickEntry, type CorpusEntry } from "./corpus";
import { FIELD_KINDS, type FieldKind, type FieldPos } from "./scan";

export interface FuzzInput {
  readonly seed: number;
  readonly index: number;
  readonly entry: string;
  /** The operations applied, in order, human readable. */
  readonly ops: readonly string[];
  readonly bytes: Uint8Array;
}

const U32_EXTREMES = [0, 1, 2, 3, 0x7f, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff];
const U64_EXTREMES = [0n, 1n, 2n, 0x7fffffffn, 0x80000000n, 0xffffffffn, 0x100000000n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 53n + 1n, 2n ** 62n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n];
const INTERESTING_BYTES = [0, 1, 0x7f, 0x80, 0xfe, 0xff];

type Op = (rng: Prng, bytes: Uint8Array, entry: CorpusEntry, corpus: readonly CorpusEntry[]) => { bytes: Uint8Array; op: string };

/** A position, mostly inside the header (where the parser looks), sometimes anywhere. */
function position(rng: Prng, bytes: Uint8Array, entry: CorpusEntry): number {
  if (bytes.length === 0) return 0;
  const end = rng.next() < 0.8 ? Math.min(entry.map.dataOffset, bytes.length) : bytes.length;
  return rng.int(Math.max(1, end));
}

function writeField(bytes: Uint8Array, f: FieldPos, value: bigint): void {
  if (f.pos + f.width > bytes.length) return;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (f.width === 4) dv.setUint32(f.pos, Number(value & 0xffffffffn), true);
  else dv.setBigUint64(f.pos, value & (2n ** 64n - 1n), true);
}

function readField(bytes: Uint8Array, f: FieldPos): bigint {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return f.width === 4 ? BigInt(dv.getUint32(f.pos, true)) : dv.getBigUint64(f.pos, true);
}

const bitFlip: Op = (rng, bytes, entry) => {
  const n = 1 + rng.int(4);
  const at: number[] = [];
  for (let i = 0; i < n && bytes.length > 0; i++) {
    const p = position(rng, bytes, entry);
    bytes[p]! ^= 1 << rng.int(8);
    at.push(p);
  }
  return { bytes, op: `flip@${at.join(",")}` };
};

const byteSet: Op = (rng, bytes, entry) => {
  if (bytes.length === 0) return { bytes, op: "byteset(empty)" };
  const p = position(rng, bytes, entry);
  const v = INTERESTING_BYTES[rng.int(INTERESTING_BYTES.length)]!;
  bytes[p] = v;
  return { bytes, op: `set@${p}=${v}` };
};

const truncate: Op = (rng, bytes, entry) => {
  // at a record boundary (+-3 bytes) half the time: where a reader switches state
  const bounds = [...entry.map.kvStarts, ...entry.map.tensorStarts, entry.map.dataOffset];
  let at = rng.next() < 0.5 ? bounds[rng.int(bounds.length)]! + rng.int(7) - 3 : position(rng, bytes, entry);
  at = Math.max(0, Math.min(bytes.length, at));
  return { bytes: bytes.slice(0, at), op: `truncate@${at}` };
};

const extend: Op = (rng, bytes) => {
  const n = 1 + rng.int(256);
  const out = new Uint8Array(bytes.length + n);
  out.set(bytes);
  const fill = rng.int(3);
  for (let i = bytes.length; i < out.length; i++) out[i] = fill === 0 ? 0 : fill === 1 ? 0xff : rng.int(256);
  return { bytes: out, op: `extend+${n}` };
};

/** How often each kind of field is picked: values the handlers act on weigh most, lengths the parser rejects at once least. */
const KIND_WEIGHT: Record<FieldKind, number> = {
  version: 1,
  tensorCount: 2,
  kvCount: 2,
  keyLength: 2,
  valueType: 3,
  stringLength: 3,
  arrayType: 3,
  arrayCount: 4,
  nDims: 3,
  dim: 8,
  ggmlType: 5,
  tensorOffset: 4,
  scalarValue: 12,
  arrayItem: 8,
};

const fieldExtreme: Op = (rng, bytes, entry) => {
  const kinds = FIELD_KINDS.filter((k) => entry.map.fields[k].length > 0);
  let x = rng.next() * kinds.reduce((s, k) => s + KIND_WEIGHT[k], 0);
  const kind = kinds.find((k) => (x -= KIND_WEIGHT[k]) < 0) ?? kinds[0]!;
  const list = entry.map.fields[kind];
  const f = list[rng.int(list.length)]!;
  if (f.pos + f.width > bytes.length) return { bytes, op: `field ${kind}@${f.pos} (cut)` };
  let value: bigint;
  const orig = readField(bytes, f);
  const r = rng.next();
  if (r < 0.2) value = orig + BigInt(rng.int(9) - 4);
  else if (r < 0.3) value = BigInt(rng.nextU32()) * (f.width === 8 && rng.next() < 0.5 ? BigInt(rng.nextU32()) : 1n);
  else if (r < 0.4) value = BigInt(bytes.length + rng.int(64) - 32);
  else value = f.width === 4 ? BigInt(U32_EXTREMES[rng.int(U32_EXTREMES.length)]!) : U64_EXTREMES[rng.int(U64_EXTREMES.length)]!;
  if (value < 0n) value += f.width === 4 ? 2n ** 32n : 2n ** 64n;
  writeField(bytes, f, value);
  return { bytes, op: `field ${kind}@${f.pos}=${value}` };
};

/** The start of one file up to a record boundary, then another file from one of its record boundaries. */
const spliceHeaders: Op = (rng, bytes, entry, corpus) => {
  const other = corpus[rng.int(corpus.length)]!;
  const mine = [...entry.map.kvStarts, ...entry.map.tensorStarts];
  const theirs = [...other.map.kvStarts, ...other.map.tensorStarts, other.map.dataOffset];
  const cut = Math.min(bytes.length, mine[rng.int(mine.length)]!);
  const from = theirs[rng.int(theirs.length)]!;
  const tail = other.bytes.subarray(from);
  const out = new Uint8Array(cut + tail.length);
  out.set(bytes.subarray(0, cut));
  out.set(tail, cut);
  return { bytes: out, op: `splice ${entry.name}[0,${cut}) + ${other.name}[${from},)` };
};

/** Permutes records of one section in place (same total length, so data offsets stay put). */
function shuffleRecords(rng: Prng, bytes: Uint8Array, starts: readonly number[], what: string): { bytes: Uint8Array; op: string } {
  const n = starts.length - 1;
  if (n < 2 || starts[n]! > bytes.length) return { bytes, op: `shuffle ${what} (none)` };
  const records = Array.from({ length: n }, (_, i) => bytes.slice(starts[i]!, starts[i + 1]!));
  const mode = rng.int(3);
  if (mode === 0) {
    for (let i = n - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [records[i], records[j]] = [records[j]!, records[i]!];
    }
  } else if (mode === 1) {
    const i = rng.int(n);
    const j = rng.int(n);
    [records[i], records[j]] = [records[j]!, records[i]!];
  } else {
    // duplicate one record over another (a duplicate name or key; lengths may differ, so the section shifts)
    records[rng.int(n)] = records[rng.int(n)]!;
  }
  const section = concat(records);
  const out = new Uint8Array(starts[0]! + section.length + (bytes.length - starts[n]!));
  out.set(bytes.subarray(0, starts[0]!));
  out.set(section, starts[0]!);
  out.set(bytes.subarray(starts[n]!), starts[0]! + section.length);
  return { bytes: out, op: `shuffle ${what} mode ${mode}` };
}

const shuffleTensors: Op = (rng, bytes, entry) => shuffleRecords(rng, bytes, entry.map.tensorStarts, "tensor infos");
const shuffleKvs: Op = (rng, bytes, entry) => shuffleRecords(rng, bytes, entry.map.kvStarts, "kvs");

/** Copies a chunk of the file over another place in it. */
const chunkCopy: Op = (rng, bytes, entry) => {
  if (bytes.length < 2) return { bytes, op: "copy (none)" };
  const from = position(rng, bytes, entry);
  const to = position(rng, bytes, entry);
  const n = Math.min(1 + rng.int(64), bytes.length - from, bytes.length - to);
  bytes.copyWithin(to, from, from + n);
  return { bytes, op: `copy ${n}@${from}->${to}` };
};

const OPS: ReadonlyArray<[number, Op]> = [
  [20, bitFlip],
  [8, byteSet],
  [12, truncate],
  [3, extend],
  [30, fieldExtreme],
  [8, spliceHeaders],
  [8, shuffleTensors],
  [4, shuffleKvs],
  [7, chunkCopy],
];
const OP_TOTAL = OPS.reduce((s, [w]) => s + w, 0);

function pickOp(rng: Prng): Op {
  let x = rng.int(OP_TOTAL);
  for (const [w, op] of OPS) {
    x -= w;
    if (x < 0) return op;
  }
  return OPS[0]![1];
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Input `index` of the run with `seed`: one corpus file with 1-3 mutations. */
export function fuzzInput(corpus: readonly CorpusEntry[], seed: number, index: number): FuzzInput {
  const rng = new Prng(hash32(`fuzz:${index}`, seed));
  const entry = pickEntry(corpus, rng.next());
  let bytes: Uint8Array = entry.bytes.slice();
  const ops: string[] = [];
  const n = 1 + (rng.next() < 0.25 ? 1 : 0) + (rng.next() < 0.1 ? 1 : 0);
  for (let i = 0; i < n; i++) {
    const r = pickOp(rng)(rng, bytes, entry, corpus);
    bytes = r.bytes;
    ops.push(r.op);
  }
  return { seed, index, entry: entry.name, ops, bytes };
}
