/**
 * The SHA-256 of a blob streamed in order, computed beside the stream rather than in its way:
 * for a large blob on a worker thread, so that reading the socket, hashing and writing the
 * consumer's files run on different cores. The bytes a worker hashes are shared with it (a
 * SharedArrayBuffer, never copied); update() resolves once they are hashed, when the caller may
 * fill them again.
 */
import { createHash } from "node:crypto";
import { Worker } from "node:worker_threads";

export interface BlobHash {
  /** Hashes `bytes` after every earlier update; resolves when `bytes` may be reused. */
  update(bytes: Uint8Array): Promise<void>;
  /** The hex digest of everything given (after the last update). */
  digest(): Promise<string>;
  /** Lets the worker go (also after a failure). */
  close(): void;
}

/** Below this, a worker's start costs more than hashing on the way. */
const WORKER_FROM = 32 << 20;

/** A hasher for `bytes` bytes still to come. */
export function blobHash(bytes: number): BlobHash {
  return bytes >= WORKER_FROM ? workerHash() : inlineHash();
}

function inlineHash(): BlobHash {
  const hash = createHash("sha256");
  return {
    update: async (bytes) => void hash.update(bytes),
    digest: async () => hash.digest("hex"),
    close: () => undefined,
  };
}

/** The worker: a CommonJS script (eval), so it needs no file beside a bundled CLI. */
const WORKER = `
const { parentPort } = require("node:worker_threads");
const hash = require("node:crypto").createHash("sha256");
parentPort.on("message", (m) => {
  if (m === "digest") parentPort.postMessage({ digest: hash.digest("hex") });
  else { hash.update(m); parentPort.postMessage(0); }
});
`;

function workerHash(): BlobHash {
  const worker = new Worker(WORKER, { eval: true });
  worker.unref(); // never what keeps the process alive
  // replies come in the order of the messages
  const waiting: Array<{ resolve(v: unknown): void; reject(e: unknown): void }> = [];
  let failed: unknown;
  const fail = (e: unknown) => {
    failed ??= e;
    for (const w of waiting.splice(0)) w.reject(failed);
  };
  worker.on("message", (m: unknown) => waiting.shift()?.resolve(m));
  worker.on("error", fail);
  worker.on("exit", () => fail(new Error("the hashing worker exited")));
  const ask = (m: unknown) =>
    new Promise<unknown>((resolve, reject) => {
      if (failed !== undefined) return reject(failed);
      waiting.push({ resolve, reject });
      worker.postMessage(m);
    });
  return {
    update: async (bytes) => void (await ask(bytes)),
    digest: async () => ((await ask("digest")) as { digest: string }).digest,
    close: () => void worker.terminate().catch(() => undefined),
  };
}
