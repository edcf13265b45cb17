/**
 * What lets `pull --to` continue an interrupted download instead of starting over. Beside each
 * output, its bytes so far: `.<name>.pulling`, at the output's full size (zeros where nothing was
 * written yet). Per blob, beside its first output, a record `.<name>.pulling.json`:
 * `{ digest, size, plan, outputs, verified }`, where the blob's bytes [0, verified) were placed or
 * computed into the outputs and those writes flushed before the record said so (it is replaced
 * atomically). `verified` equal to `size` means the blob's digest matched.
 *
 * A SHA-256 state cannot be taken out of Node's hash, so a resumed pull gives the blob's hash the
 * verified prefix again instead: the bytes the translation placed as they are are read back from the
 * outputs; the rest (the header, what ops read, padding) is asked of the registry again, a few
 * MB. A prefix whose rebuilt bytes are wrong (a disk that lost a write) makes the digest fail at
 * the end, which removes the partial files: the pull after that starts over.
 */
import { createHash } from "node:crypto";
import { readFile, rm, stat, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { writeFileAtomic } from "@compat/files";
import type { StreamPlan } from "@compat/gguf";
import type { BlobStream } from "@compat/store";

/** Where an output's bytes are while its pull runs. */
export function partialPathOf(final: string): string {
  return join(dirname(final), `.${basename(final)}.pulling`);
}

/** The record of the blob whose first output is `final`. */
export function resumeRecordOf(final: string): string {
  return `${partialPathOf(final)}.json`;
}

export interface ResumeRecord {
  digest: string;
  size: number;
  /** The plan's fingerprint (planId): another version's translation of the same blob does not continue this one. */
  plan: string;
  /** The outputs' partial file names and sizes, in plan order (the blob as it is: plan order too). */
  outputs: Array<{ file: string; size: number }>;
  verified: number;
}

/** A fingerprint of where a plan puts every byte: headers, placements and ops. */
export function planId(plan: StreamPlan | undefined, sizes: readonly number[]): string {
  const h = createHash("sha256").update(JSON.stringify({ sizes, source: plan?.sourceSize }));
  if (plan !== undefined) {
    for (const l of plan.literals) h.update(`L${l.output}:${l.at}:${l.bytes.length}`).update(l.bytes);
    h.update(JSON.stringify(plan.placements.map((p) => [p.from, p.length, p.output, p.at])));
    h.update(JSON.stringify(plan.ops.map((o) => [o.output, o.at, o.readyAt, o.tensor, o.data.length])));
  }
  return h.digest("hex");
}

/** The verified prefix of an earlier pull of the same blob and plan whose partial files are all there; undefined otherwise. */
export async function readResume(path: string, expect: Omit<ResumeRecord, "verified">): Promise<number | undefined> {
  try {
    const r = JSON.parse(await readFile(path, "utf8")) as Partial<ResumeRecord>;
    const same = r.digest === expect.digest && r.size === expect.size && r.plan === expect.plan && JSON.stringify(r.outputs) === JSON.stringify(expect.outputs);
    if (!same || !Number.isSafeInteger(r.verified) || r.verified! < 0 || r.verified! > expect.size) return undefined;
    for (const o of expect.outputs) {
      const st = await stat(join(dirname(path), o.file));
      if (!st.isFile() || st.size !== o.size) return undefined;
    }
    return r.verified;
  } catch {
    return undefined;
  }
}

export async function writeResume(path: string, record: ResumeRecord): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(record) + "\n");
}

export async function removeResume(path: string): Promise<void> {
  await rm(path, { force: true });
}

/** Reads and fetches this much at once while rebuilding a prefix's hash. */
const PIECE = 8 << 20;
/** Bytes to fetch closer together than this come in one request (the padding between tensors is a few bytes each). */
const MERGE = 1 << 20;

/** A stretch of the blob's prefix and where its bytes are now. */
type Segment = { start: number; end: number } & ({ kind: "file"; fh: FileHandle; at: number } | { kind: "fetch" });

/**
 * The blob's bytes [0, verified) (at least its head), in order, to `update`: `head` (bytes
 * [0, head.length)) from memory, the placed bytes read back from the outputs (`plain`: the blob as
 * it is, at its own offsets), the rest fetched.
 */
export async function replayPrefix(
  verified: number,
  head: Uint8Array,
  plan: StreamPlan | undefined,
  files: readonly FileHandle[],
  plain: FileHandle | undefined,
  blob: BlobStream,
  update: (bytes: Uint8Array) => Promise<void>,
): Promise<void> {
  await update(head.subarray(0, Math.min(head.length, verified)));
  const segments: Segment[] = [];
  let pos = Math.min(head.length, verified);
  if (plain !== undefined) {
    if (pos < verified) segments.push({ start: pos, end: verified, kind: "file", fh: plain, at: pos });
  } else {
    const placements = plan?.placements ?? [];
    let i = 0;
    while (pos < verified) {
      while (i < placements.length && placements[i]!.from + placements[i]!.length <= pos) i++;
      // the placement covering pos that reaches furthest (a range may be placed twice)
      let best: (typeof placements)[number] | undefined;
      for (let j = i; j < placements.length && placements[j]!.from <= pos; j++) {
        const p = placements[j]!;
        if (p.from + p.length > pos && (best === undefined || p.from + p.length > best.from + best.length)) best = p;
      }
      if (best !== undefined) {
        const end = Math.min(verified, best.from + best.length);
        segments.push({ start: pos, end, kind: "file", fh: files[best.output]!, at: best.at + (pos - best.from) });
        pos = end;
        continue;
      }
      const next = placements.slice(i).find((p) => p.from > pos)?.from ?? verified;
      const end = Math.min(verified, next);
      segments.push({ start: pos, end, kind: "fetch" });
      pos = end;
    }
  }
  // fetched spans: fetch segments near each other in one request, the placed bytes between them included
  let span: { start: number; end: number; bytes?: Uint8Array } | undefined;
  for (let k = 0; k < segments.length; k++) {
    const s = segments[k]!;
    if (s.kind === "fetch" && (span === undefined || s.start >= span.end)) {
      let end = s.end;
      for (let m = k + 1; m < segments.length; m++) {
        const t = segments[m]!;
        if (t.start - end >= MERGE || t.end - s.start > 4 * PIECE) break;
        if (t.kind === "fetch") end = t.end;
      }
      span = { start: s.start, end };
      span.bytes = await blob.range(span.start, span.end);
    }
    if (span !== undefined && s.start >= span.start && s.end <= span.end) {
      await update(span.bytes!.subarray(s.start - span.start, s.end - span.start));
      continue;
    }
    if (s.kind !== "file") throw new Error("internal: a fetched segment outside its span");
    const buf = new Uint8Array(Math.min(PIECE, s.end - s.start));
    for (let from = s.start; from < s.end; ) {
      const n = Math.min(buf.length, s.end - from);
      const { bytesRead } = await s.fh.read(buf, 0, n, s.at + (from - s.start));
      if (bytesRead !== n) throw new Error(`partial file ended early at ${from}`);
      await update(buf.subarray(0, n));
      from += n;
    }
  }
}
