/**
 * A blob downloaded once, in order, for a consumer that writes its bytes elsewhere (`pull --to`
 * writes them straight into a translation; the blob itself is never stored): its head first, as
 * far as the consumer asks, then the rest in source order, hashed as it passes. A blob whose
 * bytes do not hash to its digest is DIGEST_MISMATCH naming the layer, raised after the last
 * byte, before the consumer may give its outputs a final name.
 */
import { createHash } from "node:crypto";
import { blobHash } from "./blob-hash";
import { rawRange } from "./raw-range";
import { StoreError } from "./errors";
import { parseModelName } from "./name";
import { layerLabel } from "./pull";
import { bodyChunks, RegistryClient, RegistryError, unreachable } from "./registry";
import type { Manifest, ManifestLayer } from "./store";
import type { ModelName } from "./name";

/** Bytes handed to the consumer at once (fewer, larger writes). */
const BATCH = 8 << 20;
/** Batches in memory: one filling from the socket, the others being hashed and written. */
const BATCHES = 3;
/** Free bytes a batch has before a raw range request starts in it (more than its first read). */
const RAW_ROOM = 1 << 20;
/** Attempts on a failed connection; each continues from the last byte received. */
const MAX_TRIES = 6;

export interface OpenedPull {
  name: ModelName;
  client: RegistryClient;
  manifest: Manifest;
}

/** The registry of `ref` and its manifest (as pullModel starts). */
export async function openPull(ref: string, opts: { insecure?: boolean; signal?: AbortSignal } = {}): Promise<OpenedPull> {
  const name = parseModelName(ref);
  if (!name) throw new StoreError("INVALID_REFERENCE", `${JSON.stringify(ref)} is not an Ollama model name ([host[:port]/][namespace/]model[:tag])`, { ref });
  const client = new RegistryClient(name, { insecure: opts.insecure, httpScheme: /^http:\/\//i.test(ref.trim()), signal: opts.signal });
  const { manifest } = await client.manifest();
  return { name, client, manifest };
}

/** A small layer (template, params, config) in memory, checked against its digest. */
export async function fetchLayerBytes(client: RegistryClient, layer: ManifestLayer, signal?: AbortSignal): Promise<Uint8Array> {
  const body = layer.size === 0 ? new Uint8Array(0) : new Uint8Array(await (await client.range(await client.blobLocation(layer.digest), 0, layer.size - 1, layer.size, signal)).arrayBuffer());
  if (body.length !== layer.size) throw new StoreError("DIGEST_MISMATCH", `${layerLabel(client, layer)}: received ${body.length} bytes, the manifest says ${layer.size}`, { digest: layer.digest });
  checkDigest(client, layer, createHash("sha256").update(body).digest("hex"));
  return body;
}

export interface BlobStream {
  /**
   * Bytes [0, n) of the blob (n clamped to its size), fetched beyond what was fetched before:
   * call it with growing n until the consumer has what it needs (a GGUF header).
   */
  head(n: number): Promise<Uint8Array>;
  /**
   * The rest of the blob after the head, in order, to `onBytes` (awaited before the next batch
   * goes), then the digest check. `onBytes` must not keep the array it is given.
   */
  rest(onBytes: (offset: number, bytes: Uint8Array) => Promise<void>, onProgress?: (completed: number) => void, resume?: ResumePoint): Promise<void>;
  /** Bytes [start, end) of the blob, in one range request (not hashed: a resumed consumer rebuilds a prefix's hash with them). */
  range(start: number, end: number): Promise<Uint8Array>;
}

/**
 * Where a consumer continues an earlier download: it has the blob's bytes [0, at) in place, and
 * gives them again, in order, to `prefix`'s `update` for the blob's hash (the head first).
 */
export interface ResumePoint {
  at: number;
  prefix(update: (bytes: Uint8Array) => Promise<void>): Promise<void>;
}

export function streamBlob(client: RegistryClient, layer: ManifestLayer, signal?: AbortSignal): BlobStream {
  let url: Promise<URL> | undefined;
  const location = () => (url ??= client.blobLocation(layer.digest));
  let headBytes = new Uint8Array(0);
  return {
    async head(n) {
      const want = Math.min(n, layer.size);
      if (want <= headBytes.length) return headBytes.subarray(0, want);
      const more = new Uint8Array(await (await client.range(await location(), headBytes.length, want - 1, layer.size, signal)).arrayBuffer());
      if (more.length !== want - headBytes.length) throw new RegistryError("BAD_REGISTRY_REPLY", `${layerLabel(client, layer)}: asked for ${want - headBytes.length} bytes, received ${more.length}`);
      const grown = new Uint8Array(want);
      grown.set(headBytes);
      grown.set(more, headBytes.length);
      headBytes = grown;
      return headBytes;
    },
    async range(start, end) {
      if (start >= end) return new Uint8Array(0);
      const bytes = new Uint8Array(await (await client.range(await location(), start, end - 1, layer.size, signal)).arrayBuffer());
      if (bytes.length !== end - start) throw new RegistryError("BAD_REGISTRY_REPLY", `${layerLabel(client, layer)}: asked for ${end - start} bytes, received ${bytes.length}`);
      return bytes;
    },
    async rest(onBytes, onProgress, resume) {
      let offset = resume?.at ?? headBytes.length; // the stream position of the batch being filled
      const hash = blobHash(layer.size);
      try {
        if (resume !== undefined) await resume.prefix((bytes) => hash.update(bytes));
        else await hash.update(headBytes);
        const at = await location();
        // batches shared with the hashing worker: one filling while the ones before are hashed and written
        const size = Math.min(BATCH, Math.max(1, layer.size - offset));
        const buffers = Array.from({ length: BATCHES }, () => new Uint8Array(new SharedArrayBuffer(size)));
        const busy: Array<Promise<void>> = buffers.map(() => Promise.resolve());
        let which = 0;
        let fill = 0;
        let written: Promise<void> = Promise.resolve(); // the consumer's turn: batches go to it in order
        const dispatch = async () => {
          if (fill === 0) return;
          const batch = buffers[which]!.subarray(0, fill);
          const from = offset;
          const hashed = hash.update(batch).catch((e: unknown) => {
            throw new ConsumerFailed(e);
          });
          written = written.then(() =>
            onBytes(from, batch).then(
              () => onProgress?.(from + batch.length),
              (e: unknown) => {
                throw new ConsumerFailed(e);
              },
            ),
          );
          busy[which] = Promise.all([hashed, written]).then(() => undefined);
          busy[which]!.catch(() => undefined); // awaited before the batch is filled again or at the end; not unhandled meanwhile
          offset += fill;
          fill = 0;
          which = (which + 1) % buffers.length;
          await busy[which];
        };
        let lastError: unknown;
        // plain HTTP: the body read straight into the batches, unless the registry answers otherwise
        let raw = at.protocol === "http:";
        for (let tries = 0; offset + fill < layer.size && tries < MAX_TRIES; ) {
          signal?.throwIfAborted();
          try {
            if (raw) {
              // the body bytes that come with the reply's header are copied into the batch at once: room for them
              if (buffers[which]!.length - fill < RAW_ROOM && fill > 0) await dispatch();
              const sink = {
                space: () => buffers[which]!.subarray(fill),
                took: (n: number) => {
                  fill += n;
                  return fill === buffers[which]!.length ? dispatch() : undefined;
                },
              };
              if ((await rawRange(at, offset + fill, layer.size - 1, layer.size, client.authorizationFor(at), sink, signal)) === "done") continue;
              raw = false;
            }
            const res = await client.range(at, offset + fill, layer.size - 1, layer.size, signal);
            for await (const chunk of bodyChunks(res)) {
              if (offset + fill + chunk.length > layer.size) throw new RegistryError("BAD_REGISTRY_REPLY", `${at.href}: more bytes than the layer has`);
              for (let used = 0; used < chunk.length; ) {
                const n = Math.min(chunk.length - used, buffers[which]!.length - fill);
                buffers[which]!.set(chunk.subarray(used, used + n), fill);
                fill += n;
                used += n;
                if (fill === buffers[which]!.length) await dispatch();
              }
            }
          } catch (e) {
            if (e instanceof ConsumerFailed) throw e.cause;
            if (signal?.aborted || e instanceof StoreError) throw e;
            if (e instanceof RegistryError && e.code !== "REGISTRY_UNREACHABLE" && e.code !== "BAD_REGISTRY_REPLY") throw e;
            lastError = e instanceof RegistryError ? e : unreachable(at, e);
            if (++tries < MAX_TRIES) await new Promise((r) => setTimeout(r, 250 * 2 ** tries));
          }
        }
        try {
          await dispatch();
          await Promise.all(busy);
        } catch (e) {
          throw e instanceof ConsumerFailed ? e.cause : e;
        }
        if (offset < layer.size) throw lastError ?? new RegistryError("BAD_REGISTRY_REPLY", `${at.href}: the layer ended ${layer.size - offset} bytes short`);
        checkDigest(client, layer, await hash.digest());
      } finally {
        hash.close();
      }
    },
  };
}

function checkDigest(client: RegistryClient, layer: ManifestLayer, hex: string): void {
  const actual = `sha256:${hex}`;
  if (actual !== layer.digest) throw new StoreError("DIGEST_MISMATCH", `${layerLabel(client, layer)}: the bytes received hash to ${actual}, not ${layer.digest}; nothing was kept`, { digest: layer.digest, actual });
}

/** The consumer's (or the hash's) own failure, told apart from the network's (which is retried). */
class ConsumerFailed {
  constructor(readonly cause: unknown) {}
}
