/**
 * The sha256 of a file hashed while it is written, never read back: a blob's name is its digest,
 * and reading a fresh multi-GiB blob again to learn it cost more than writing it (migrate spent
 * two thirds of each blob's time in that second pass).
 *
 * The writer tells the hasher each piece of its output in output order: bytes it writes through
 * memory (`bytes`, its WriteOptions.tee) and ranges of an open source file the kernel copies
 * (`copier` wraps the RangeCopier, so a range is hashed only once the copy succeeded; a declined
 * copy reaches `bytes` instead). The hashing runs on a worker thread: its reads of a range just
 * copied come from the page cache and overlap the kernel's copy of the next one (and the final
 * fsync) on the other core.
 *
 * One HashingThread serves many outputs (a migration's blobs, several at once): a worker's start
 * costs ~90 ms of CPU and a heap of its own, and one per blob made ten of them for five models.
 * The thread holds the process open only while some output is being hashed.
 */
import { Worker } from "node:worker_threads";
import type { RangeCopier } from "@compat/files";

export interface BlobHash {
  hex: string;
  size: number;
}

/** Bytes posted but not yet hashed beyond which `bytes` makes the writer wait (per output). */
const MAX_PENDING = 64 << 20;

/**
 * Written bytes reach the thread in slabs of this size, which it sends back once hashed to carry
 * the next bytes: a fresh buffer per chunk was 73% of a migration's page faults (a computed
 * tensor's 24 MiB, faulted in page by page each time; each fault exits to the hypervisor on these
 * guests). Chunks below SMALL go in a buffer of their own (malloc's, already mapped).
 */
const SLAB = 4 << 20;
const SMALL = 64 << 10;
/** Slabs kept for reuse at most (the rest are left to the collector). */
const KEEP_SLABS = 20;

// Plain CommonJS evaluated as the worker's source: no file of its own to locate after bundling.
// Each message names its output (id); the outputs' pieces are hashed in the order they come,
// through one read buffer.
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const { readSync } = require("node:fs");
const outputs = new Map();
let buf;
parentPort.on("message", (m) => {
  if (m.drop) return void outputs.delete(m.id);
  let o = outputs.get(m.id);
  if (o === undefined) outputs.set(m.id, (o = { hash: createHash("sha256"), size: 0, failure: undefined }));
  if (m.end) {
    outputs.delete(m.id);
    return parentPort.postMessage(o.failure !== undefined ? { id: m.id, error: o.failure } : { id: m.id, hex: o.hash.digest("hex"), size: o.size });
  }
  if (m.bytes) {
    if (o.failure === undefined) {
      o.hash.update(m.bytes);
      o.size += m.bytes.length;
    }
    // a slab goes back to carry the next bytes
    return m.slab ? parentPort.postMessage({ id: m.id, hashed: m.bytes.length, slab: m.bytes.buffer }, [m.bytes.buffer]) : parentPort.postMessage({ id: m.id, hashed: m.bytes.length });
  }
  if (o.failure !== undefined) return;
  try {
    buf ??= Buffer.allocUnsafe(8 << 20);
    for (let done = 0; done < m.length; ) {
      const n = readSync(m.fd, buf, 0, Math.min(buf.length, m.length - done), m.offset + done);
      if (n === 0) throw new Error("the source ended at " + (m.offset + done) + " (" + (m.length - done) + " bytes of the range left)");
      o.hash.update(n === buf.length ? buf : buf.subarray(0, n));
      done += n;
      o.size += n;
    }
  } catch (e) {
    o.failure = String((e && e.message) || e);
  }
});
`;

type Reply = { id: number; hashed?: number; slab?: ArrayBuffer; hex?: string; size?: number; error?: string };

/** A worker thread that hashes outputs for OutputHashers (`hasher()`); close() ends it. */
export class HashingThread {
  private readonly worker = new Worker(WORKER_SOURCE, { eval: true });
  private readonly outputs = new Map<number, (m: Reply) => void>();
  private nextId = 0;
  private readonly slabs: ArrayBuffer[] = [];
  private stopped: Error | undefined;
  private closed = false;

  constructor() {
    this.worker.unref(); // ref'd while an output is open: an idle thread never keeps the process alive
    this.worker.on("message", (m: Reply) => {
      if (m.slab !== undefined && this.slabs.length < KEEP_SLABS) this.slabs.push(m.slab);
      this.outputs.get(m.id)?.(m);
    });
    const stop = (e: Error) => {
      this.stopped ??= e;
      for (const [id, listener] of [...this.outputs]) listener({ id, error: this.stopped.message });
    };
    this.worker.on("error", stop);
    this.worker.on("exit", () => stop(new Error("the hashing worker stopped before the digest")));
  }

  /** A hasher of one more output on this thread. */
  hasher(): OutputHasher {
    return new OutputHasher(this);
  }

  /** Stops the thread (idempotent); digests still pending reject. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.worker.terminate();
  }

  /** @internal An output's id, its replies given to `listener`. */
  open(listener: (m: Reply) => void): number {
    const id = this.nextId++;
    this.outputs.set(id, listener);
    this.worker.ref();
    if (this.stopped !== undefined) queueMicrotask(() => listener({ id, error: this.stopped!.message }));
    return id;
  }

  /** @internal */
  post(m: Record<string, unknown>, transfer?: ArrayBuffer[]): void {
    if (this.stopped === undefined) this.worker.postMessage(m, transfer);
  }

  /**
   * @internal Hands `chunk` (copied: the writer may reuse it) to output `id`: through returned
   * slabs unless it is small.
   */
  postBytes(id: number, chunk: Uint8Array): void {
    if (chunk.length < SMALL) {
      const copy = new Uint8Array(chunk); // its own buffer (a Buffer's slice() would share the writer's), moved, not cloned again
      return this.post({ id, bytes: copy }, [copy.buffer as ArrayBuffer]);
    }
    for (let off = 0; off < chunk.length; off += SLAB) {
      const n = Math.min(SLAB, chunk.length - off);
      const bytes = new Uint8Array(this.slabs.pop() ?? new ArrayBuffer(SLAB), 0, n);
      bytes.set(chunk.subarray(off, off + n));
      this.post({ id, bytes, slab: true }, [bytes.buffer as ArrayBuffer]);
    }
  }

  /** @internal The output is done (digested or dropped): no more replies for it. */
  release(id: number, drop: boolean): void {
    if (!this.outputs.delete(id)) return;
    if (drop) this.post({ id, drop: true });
    if (this.outputs.size === 0) this.worker.unref();
  }
}

/** sha256 of a writer's output from its pieces in output order, hashed on a worker thread (a HashingThread's, else its own). */
export class OutputHasher {
  private readonly thread: HashingThread;
  private readonly owned: boolean;
  private readonly id: number;
  private pending = 0;
  private drained: Array<() => void> = [];
  private readonly result: Promise<BlobHash>;
  private readonly settle: { resolve: (h: BlobHash) => void; reject: (e: Error) => void };
  private closed = false;

  constructor(thread?: HashingThread) {
    this.owned = thread === undefined;
    this.thread = thread ?? new HashingThread();
    let settle!: { resolve: (h: BlobHash) => void; reject: (e: Error) => void };
    this.result = new Promise<BlobHash>((resolve, reject) => (settle = { resolve, reject }));
    this.settle = settle;
    this.result.catch(() => undefined); // observed by digest(); a writer that failed first never asks
    this.id = this.thread.open((m) => {
      if (m.hashed !== undefined) {
        this.pending -= m.hashed;
        if (this.pending <= MAX_PENDING / 2) this.wake();
      } else if (m.error !== undefined) {
        this.wake();
        settle.reject(new Error(`hashing the output failed: ${m.error}`));
      } else settle.resolve({ hex: m.hex!, size: m.size! });
    });
  }

  /** The next `chunk` of output (copied: the writer may reuse it); resolves once the backlog allows more. */
  bytes(chunk: Uint8Array): Promise<void> | undefined {
    if (chunk.length === 0) return undefined;
    this.pending += chunk.length;
    this.thread.postBytes(this.id, chunk);
    return this.pending > MAX_PENDING ? new Promise<void>((resolve) => this.drained.push(resolve)) : undefined;
  }

  /** The next `length` bytes of output are those of the open file `fd` from `offset` (which must stay open until digest()). */
  range(fd: number, offset: number, length: number): void {
    if (length > 0) this.thread.post({ id: this.id, fd, offset, length });
  }

  /** `inner`, with each range it copies hashed as the next piece of output. */
  copier(inner: RangeCopier): RangeCopier {
    return async (srcFd, srcOffset, dstFd, dstOffset, length) => {
      const copied = await inner(srcFd, srcOffset, dstFd, dstOffset, length);
      if (copied) this.range(srcFd, srcOffset, length);
      return copied;
    };
  }

  /** The digest of everything told so far; the hasher is finished after. */
  async digest(): Promise<BlobHash> {
    this.thread.post({ id: this.id, end: true });
    try {
      return await this.result;
    } finally {
      this.closed = true; // the thread forgot this output when it answered
      this.thread.release(this.id, false);
      if (this.owned) await this.thread.close();
    }
  }

  /** Lets the output go (idempotent): its state on the thread is dropped, a thread of its own stopped; a pending digest() rejects. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wake();
    this.settle.reject(new Error("the hasher was closed before the digest"));
    this.thread.release(this.id, true);
    if (this.owned) await this.thread.close();
  }

  private wake(): void {
    for (const wake of this.drained.splice(0)) wake();
  }
}
