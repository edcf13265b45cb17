/**
 * `ollama pull` into an Ollama store: the manifest, then each layer (one after another, each
 * in up to 16 parts downloaded in parallel by range requests), every blob checked against its
 * digest before it gets its final name, and the manifest written last. Interrupted at any
 * moment, it leaves only names Ollama treats as garbage, and the next pull continues from what
 * was written and flushed.
 *
 * On disk, while a blob downloads (the names and the part records are Ollama's own, so either
 * program can continue the other's download, and Ollama's prune removes them as invalid blob
 * names): `blobs/sha256-<hex>-partial` holds the bytes at their offsets, and
 * `blobs/sha256-<hex>-partial-<N>` records part N as JSON `{N, Offset, Size, Completed}`, where
 * Completed counts the bytes from Offset that are written and flushed (records are replaced
 * atomically, after the bytes they count were flushed).
 */
import { mkdir, open, readdir, readFile, rm, stat, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { acquireLock, processAlive, tempFileOwner, writeFileAtomic } from "@compat/files";
import { StoreError } from "./errors";
import { parseModelName, fullName, type ModelName } from "./name";
import { bodyChunks, RegistryClient, RegistryError, unreachable } from "./registry";
import type { ManifestLayer } from "./store";
import { blobPathIn, installBlob, manifestDigests, manifestPathIn, removeUnreferenced, writeBlobBytesChecked, writeModelManifest } from "./store-write";

/** One of Ollama's progress objects (api.ProgressResponse), as `ollama pull` and /api/pull report them. */
export interface PullProgress {
  status: string;
  digest?: string;
  total?: number;
  completed?: number;
}

export interface PullOptions {
  /** The store's root ($OLLAMA_MODELS). */
  root: string;
  /** Plain HTTP instead of HTTPS. */
  insecure?: boolean;
  onProgress?: (p: PullProgress) => void;
  signal?: AbortSignal;
  /** OLLAMA_NOPRUNE set: the layers of a replaced version are kept. */
  env?: Record<string, string | undefined>;
  /** The key token requests are signed with (default ~/.ollama/id_ed25519). */
  identity?: string;
  /** Blobs a running server still reads: a replaced version's are kept while this says so. */
  keep?: (digest: string) => boolean;
  /** The smallest part (default Ollama's 100 MB); tests make it small to have many parts. */
  minPartBytes?: number;
}

export interface PulledModel {
  name: ModelName;
  manifestPath: string;
  layers: ManifestLayer[];
}

/** Ollama's figures: at most 16 parts per blob, each between 100 MB and 1000 MB. */
const MAX_PARTS = 16;
const MIN_PART = 100_000_000;
const MAX_PART = 1_000_000_000;
/** Layers up to this size (config, template, params) come in one request, held in memory. */
const SMALL_BLOB = 1 << 20;
/** Bytes of a part written between two flushes and records: what a crash can cost to download again. */
const CHECKPOINT = 16 << 20;
/** A part that receives nothing for this long is asked again. */
const STALL_MS = 30_000;
/** Attempts per part on a failed connection (a stalled one does not count). */
const MAX_TRIES = 6;
/** Progress objects are sent at most this often per layer. */
const PROGRESS_EVERY_MS = 100;

/** Pulls `ref` (`model[:tag]`, `namespace/model:tag`, `host[:port]/namespace/model:tag`) into the store. */
export async function pullModel(ref: string, opts: PullOptions): Promise<PulledModel> {
  const name = parseModelName(ref);
  if (!name) throw new StoreError("INVALID_REFERENCE", `${JSON.stringify(ref)} is not an Ollama model name ([host[:port]/][namespace/]model[:tag])`, { ref });
  const report = opts.onProgress ?? (() => {});
  const client = new RegistryClient(name, { insecure: opts.insecure, httpScheme: /^http:\/\//i.test(ref.trim()), signal: opts.signal, identity: opts.identity });
  report({ status: "pulling manifest" });
  const { bytes, manifest } = await client.manifest();
  const layers = [...manifest.layers, ...(manifest.config ? [manifest.config] : [])];
  const seen = new Set<string>();
  for (const layer of layers) {
    if (seen.has(layer.digest)) continue;
    seen.add(layer.digest);
    await pullBlob(client, layer, opts, report);
  }
  report({ status: "verifying sha256 digest" });
  report({ status: "writing manifest" });
  const before = await manifestDigests(manifestPathIn(opts.root, name));
  const manifestPath = await writeModelManifest(opts.root, name, bytes);
  // the layers of the version this pull replaced, unless another model uses them (Ollama's
  // PullModel does the same, unless OLLAMA_NOPRUNE is set)
  if (before.length > 0 && !opts.env?.OLLAMA_NOPRUNE) {
    report({ status: "removing unused layers" });
    await removeUnreferenced(opts.root, before, opts.keep);
  }
  report({ status: "success" });
  return { name, manifestPath, layers: manifest.layers };
}

/** What a layer is called in messages: its media type, digest and model. */
export function layerLabel(client: RegistryClient, layer: ManifestLayer): string {
  return `layer ${layer.digest} (${layer.mediaType}) of ${fullName(client.name)}`;
}

async function pullBlob(client: RegistryClient, layer: ManifestLayer, opts: PullOptions, report: (p: PullProgress) => void): Promise<void> {
  const final = blobPathIn(opts.root, layer.digest);
  const status = `pulling ${layer.digest.slice(7, 19)}`;
  const have = await stat(final).catch(() => undefined);
  if (have?.isFile() && have.size === layer.size) {
    // a blob under its final name was checked when it got it
    await removeLeftovers(final);
    report({ status, digest: layer.digest, total: layer.size, completed: layer.size });
    return;
  }
  await mkdirFor(final);
  if (layer.size <= SMALL_BLOB) {
    let body = Buffer.alloc(0);
    if (layer.size > 0) {
      const res = await client.range(await client.blobLocation(layer.digest), 0, layer.size - 1, layer.size, opts.signal);
      body = Buffer.from(await res.arrayBuffer());
    }
    if (body.length !== layer.size) throw new StoreError("DIGEST_MISMATCH", `${layerLabel(client, layer)}: received ${body.length} bytes, the manifest says ${layer.size}; nothing was kept`, { digest: layer.digest });
    await writeBlobBytesChecked(opts.root, layer.digest, body, layerLabel(client, layer));
    report({ status, digest: layer.digest, total: layer.size, completed: layer.size });
    return;
  }
  // one downloader per blob at a time (two pulls of models sharing a layer, or a pull run twice)
  const release = await acquireLock(`${final}-partial.lock`, { timeoutMs: 24 * 3600_000, staleMs: 60_000, what: `the download of ${layer.digest}`, signal: opts.signal });
  try {
    // the pull we waited for may have finished it
    if ((await stat(final).catch(() => undefined))?.size === layer.size) {
      report({ status, digest: layer.digest, total: layer.size, completed: layer.size });
      return;
    }
    await downloadParts(client, layer, final, opts, (completed) => report({ status, digest: layer.digest, total: layer.size, completed }));
    report({ status, digest: layer.digest, total: layer.size, completed: layer.size });
    await installBlob(opts.root, layer.digest, `${final}-partial`, layerLabel(client, layer)).catch(async (e: unknown) => {
      // bytes that do not hash right are worth nothing to the next pull either
      if (e instanceof StoreError && e.code === "DIGEST_MISMATCH") await removeLeftovers(final);
      throw e;
    });
    await removeLeftovers(final);
  } finally {
    await release();
  }
}

interface Part {
  N: number;
  Offset: number;
  Size: number;
  Completed: number;
}

/** Downloads every unfinished part of `layer` into `<final>-partial`, recording progress in `<final>-partial-<N>`. */
async function downloadParts(client: RegistryClient, layer: ManifestLayer, final: string, opts: PullOptions, progress: (completed: number) => void): Promise<void> {
  const dataPath = `${final}-partial`;
  let parts = await readParts(final, layer.size);
  const data = await open(dataPath, parts ? "r+" : "w+").catch(async (e: NodeJS.ErrnoException) => {
    if (e.code !== "ENOENT") throw e;
    parts = undefined; // the records outlived their data: start over
    return open(dataPath, "w+");
  });
  try {
    if (!parts || (await data.stat()).size !== layer.size) {
      await removeLeftovers(final, { keepData: true });
      await data.truncate(0);
      await data.truncate(layer.size);
      parts = planParts(layer.size, opts.minPartBytes ?? MIN_PART);
      for (const p of parts) await writePart(final, p);
    }
    let completed = parts.reduce((s, p) => s + p.Completed, 0);
    let lastReport = 0;
    const tick = (n: number) => {
      completed += n;
      const now = Date.now();
      if (now - lastReport >= PROGRESS_EVERY_MS) {
        lastReport = now;
        progress(completed);
      }
    };
    progress(completed);
    const url = await client.blobLocation(layer.digest);
    const failed = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, failed.signal]) : failed.signal;
    await Promise.all(
      parts
        .filter((p) => p.Completed < p.Size)
        .map((p) =>
          downloadPart(client, url, layer, final, data, p, signal, tick).catch((e: unknown) => {
            failed.abort(); // one part failed for good: stop the others, keeping what they flushed
            throw e;
          }),
        ),
    );
    await data.sync();
  } finally {
    await data.close();
  }
}

/** Ollama's split: total/16, within [min, 1000 MB], the last part the rest. */
function planParts(total: number, min: number): Part[] {
  const size = Math.min(Math.max(Math.ceil(total / MAX_PARTS), min), MAX_PART);
  const parts: Part[] = [];
  for (let offset = 0; offset < total; offset += size) parts.push({ N: parts.length, Offset: offset, Size: Math.min(size, total - offset), Completed: 0 });
  return parts;
}

/** The part records of a download in progress, if they describe `total` bytes exactly; undefined otherwise (start over). */
async function readParts(final: string, total: number): Promise<Part[] | undefined> {
  const prefix = `${basename(final)}-partial-`;
  const names = (await readdir(dirname(final)).catch(() => [] as string[])).filter((n) => n.startsWith(prefix) && /^\d+$/.test(n.slice(prefix.length)));
  if (names.length === 0) return undefined;
  const parts: Part[] = [];
  for (const n of names) {
    try {
      const p = JSON.parse(await readFile(join(dirname(final), n), "utf8")) as Partial<Part>;
      const ints = [p.N, p.Offset, p.Size, p.Completed].every((x) => Number.isSafeInteger(x) && (x as number) >= 0);
      if (!ints || p.Completed! > p.Size! || `${prefix}${p.N}` !== n) return undefined;
      parts.push(p as Part);
    } catch {
      return undefined;
    }
  }
  parts.sort((a, b) => a.Offset - b.Offset);
  let at = 0;
  for (const p of parts) {
    if (p.Offset !== at || p.Size === 0) return undefined;
    at += p.Size;
  }
  return at === total ? parts : undefined;
}

async function writePart(final: string, p: Part): Promise<void> {
  await writeFileAtomic(`${final}-partial-${p.N}`, JSON.stringify({ N: p.N, Offset: p.Offset, Size: p.Size, Completed: p.Completed }) + "\n");
}

/** One part: ranged GETs from where it stands, retried on failed or stalled connections, its record advanced after each flush. */
async function downloadPart(
  client: RegistryClient,
  url: URL,
  layer: ManifestLayer,
  final: string,
  data: FileHandle,
  p: Part,
  signal: AbortSignal,
  tick: (n: number) => void,
): Promise<void> {
  let lastError: unknown;
  for (let tries = 0; tries < MAX_TRIES && p.Completed < p.Size; ) {
    signal.throwIfAborted();
    const stall = new AbortController();
    let timer = setTimeout(() => stall.abort(), STALL_MS);
    const attempt = AbortSignal.any([signal, stall.signal]);
    let flushed = p.Completed;
    let written = p.Completed;
    const checkpoint = async () => {
      if (written === flushed) return;
      await data.datasync();
      flushed = written;
      p.Completed = written;
      await writePart(final, p);
    };
    try {
      const res = await client.range(url, p.Offset + p.Completed, p.Offset + p.Size - 1, layer.size, attempt);
      for await (const bytes of bodyChunks(res)) {
        clearTimeout(timer);
        timer = setTimeout(() => stall.abort(), STALL_MS);
        if (written + bytes.length > p.Size) throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: more bytes than asked for part ${p.N}`);
        for (let off = 0; off < bytes.length; ) off += (await data.write(bytes, off, bytes.length - off, p.Offset + written + off)).bytesWritten;
        written += bytes.length;
        tick(bytes.length);
        if (written - flushed >= CHECKPOINT) await checkpoint();
      }
      await checkpoint();
      if (p.Completed < p.Size) throw new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: the connection ended ${p.Size - p.Completed} bytes short of part ${p.N}`);
    } catch (e) {
      // keep what was received: flushed and recorded, the next attempt (or pull) starts after it
      await checkpoint().catch(() => undefined);
      tick(p.Completed - written);
      if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : e;
      lastError = e instanceof RegistryError || e instanceof StoreError ? e : (e as Error).name === "AbortError" ? e : unreachable(url, e);
      if (!stall.signal.aborted) {
        tries++;
        if (tries < MAX_TRIES) await sleep(Math.min(1000 * 2 ** tries, 30_000) / 4, signal);
      }
    } finally {
      clearTimeout(timer);
    }
  }
  if (p.Completed < p.Size) throw lastError ?? new RegistryError("BAD_REGISTRY_REPLY", `${url.href}: part ${p.N} did not finish`);
}

/**
 * Removes what a download of `final` left: part records, the data file (unless kept), and the
 * temp files of records whose writer was killed mid-write.
 */
async function removeLeftovers(final: string, opts: { keepData?: boolean } = {}): Promise<void> {
  const dir = dirname(final);
  const base = basename(final);
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const n of names) {
    const record = n.startsWith(`${base}-partial-`) && /^\d+$/.test(n.slice(base.length + 9));
    const dataFile = n === `${base}-partial` && !opts.keepData;
    const owner = tempFileOwner(n);
    const deadTemp = owner !== undefined && owner.base.startsWith(`${base}-partial-`) && owner.pid !== process.pid && !processAlive(owner.pid);
    if (record || dataFile || deadTemp) await rm(join(dir, n), { force: true });
  }
}

async function mkdirFor(path: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}
