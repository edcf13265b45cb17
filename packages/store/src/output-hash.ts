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
 */
import { Worker } from "node:worker_threads";
import type { RangeCopier } from "@compat/files";

export interface BlobHash {
  hex: string;
  size: number;
}

/** Bytes posted but not yet hashed beyond which `bytes` makes the writer wait. */
const MAX_PENDING = 64 << 20;

// Plain CommonJS evaluated as the worker's source: no file of its own to locate after bundling.
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const { readSync } = require("node:fs");
const hash = createHash("sha256");
let size = 0;
let failure;
let buf;
parentPort.on("message", (m) => {
  if (m.end) return parentPort.postMessage(failure !== undefined ? { error: failure } : { hex: hash.digest("hex"), size });
  if (failure !== undefined) return m.bytes ? parentPort.postMessage({ hashed: m.bytes.length }) : undefined;
  try {
    if (m.bytes) {
      hash.update(m.bytes);
      size += m.bytes.length;
      return parentPort.postMessage({ hashed: m.bytes.length });
    }
    buf ??= Buffer.allocUnsafe(8 << 20);
    for (let done = 0; done < m.length; ) {
      const n = readSync(m.fd, buf, 0, Math.min(buf.length, m.length - done), m.offset + done);
      if (n === 0) throw new Error("the source ended at " + (m.offset + done) + " (" + (m.length - done) + " bytes of the range left)");
      hash.update(n === buf.length ? buf : buf.subarray(0, n));
      done += n;
      size += n;
    }
  } catch (e) {
    failure = String((e && e.message) || e);
  }
});
`;

/** sha256 of a writer's output from its pieces in output order, hashed on a worker thread. */
export class OutputHasher {
  private readonly worker = new Worker(WORKER_SOURCE, { eval: true });
  private pending = 0;
  private drained: Array<() => void> = [];
  private readonly result: Promise<BlobHash>;
  private closed = false;

  constructor() {
    this.result = new Promise<BlobHash>((resolve, reject) => {
      this.worker.on("message", (m: { hashed?: number; hex?: string; size?: number; error?: string }) => {
        if (m.hashed !== undefined) {
          this.pending -= m.hashed;
          if (this.pending <= MAX_PENDING / 2) for (const wake of this.drained.splice(0)) wake();
        } else if (m.error !== undefined) reject(new Error(`hashing the output failed: ${m.error}`));
        else resolve({ hex: m.hex!, size: m.size! });
      });
      this.worker.on("error", reject);
      this.worker.on("exit", () => reject(new Error("the hashing worker stopped before the digest")));
    });
    this.result.catch(() => undefined); // observed by digest(); a writer that failed first never asks
  }

  /** The next `chunk` of output (copied: the writer may reuse it); resolves once the backlog allows more. */
  bytes(chunk: Uint8Array): Promise<void> | undefined {
    if (chunk.length === 0) return undefined;
    this.pending += chunk.length;
    const copy = new Uint8Array(chunk); // its own buffer (a Buffer's slice() would share the writer's), moved, not cloned again
    this.worker.postMessage({ bytes: copy }, [copy.buffer]);
    return this.pending > MAX_PENDING ? new Promise<void>((resolve) => this.drained.push(resolve)) : undefined;
  }

  /** The next `length` bytes of output are those of the open file `fd` from `offset` (which must stay open until digest()). */
  range(fd: number, offset: number, length: number): void {
    if (length > 0) this.worker.postMessage({ fd, offset, length });
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
    this.worker.postMessage({ end: true });
    try {
      return await this.result;
    } finally {
      await this.close();
    }
  }

  /** Stops the worker (idempotent); a pending digest() rejects. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const wake of this.drained.splice(0)) wake();
    await this.worker.terminate();
  }
}
