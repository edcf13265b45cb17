/**
 * Writing into a live Ollama store (`migrate`, and whatever else adds blobs or switches
 * manifests there) so that a running Ollama, a second writer or a crash never sees a half
 * file under a name that means something.
 *
 * Where partial files live, and why there: Ollama's startup prune (server/images.go
 * PruneLayers) deletes every file directly in blobs/ whose name is not `sha256-<64 hex>` once it
 * is an hour old, and reads every file four levels below manifests/ as a manifest (a name it
 * cannot parse makes it skip the prune and warn). So partial blobs are staged in
 * `blobs/.ollama-compat-tmp/` and partial manifests in `manifests/.ollama-compat-tmp/`: folders,
 * which the prune skips and the manifest glob (exactly four levels below manifests/) never reaches, on the same
 * file system as their final names, so the last step is one rename. Staged files carry their
 * writer's pid in the one temp naming (@compat/gguf tempPathFor), so a later writer sweeps
 * only those whose process is gone.
 *
 * A blob is renamed to `sha256-<hex>` only once it is complete, fsynced and hashed; a manifest
 * only once its bytes are fsynced; the folder is fsynced after each rename. Hence at every
 * instant every name in the store is complete.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readdir, rename, rm, rmdir, stat, unlink } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { sweepTempFiles, tempPathFor, writeFileAtomic } from "@compat/files";
import { StoreError } from "./errors";
import { displayName, manifestSegments, type ModelName } from "./name";
import { ModelStore, readManifestText } from "./store";
import { blobFileName, canonicalDigest } from "./digest";
import type { BlobHash } from "./output-hash";

/** The staging folder's name, in blobs/ and in manifests/. */
export const STAGING_DIR = ".ollama-compat-tmp";

export function blobStaging(root: string): string {
  return join(root, "blobs", STAGING_DIR);
}

export function manifestStaging(root: string): string {
  return join(root, "manifests", STAGING_DIR);
}

export interface WrittenBlob {
  /** `sha256:<hex>`. */
  digest: string;
  size: number;
  path: string;
  /** False when a blob of that digest was already there (nothing new on disk). */
  created: boolean;
}

/**
 * Adds a blob whose bytes `produce` writes to the path it is given (atomically: e.g.
 * TranslatedView.writeTo or writeFileAtomic), renamed to its content address; an existing blob
 * of the same digest and size is kept and the copy dropped. A producer that hashed its output
 * while writing it (OutputHasher) returns the digest; otherwise the file is read back to hash it.
 */
export async function addBlob(root: string, produce: (path: string) => Promise<BlobHash | void>): Promise<WrittenBlob> {
  const staging = blobStaging(root);
  await mkdir(staging, { recursive: true });
  await sweepTempFiles(staging);
  const staged = tempPathFor(join(staging, "blob"));
  try {
    const { hex, size } = (await produce(staged)) ?? (await hashFile(staged));
    const path = join(root, "blobs", `sha256-${hex}`);
    const existing = await stat(path).catch(() => undefined);
    if (existing?.isFile() && existing.size === size) {
      await rm(staged, { force: true });
      return { digest: `sha256:${hex}`, size, path, created: false };
    }
    await rename(staged, path);
    await fsyncDir(dirname(path));
    return { digest: `sha256:${hex}`, size, path, created: true };
  } finally {
    await rm(staged, { force: true }).catch(() => undefined);
  }
}

/** addBlob for bytes in memory (a config, a small text layer). */
export function addBlobBytes(root: string, bytes: Uint8Array | string): Promise<WrittenBlob> {
  return addBlob(root, async (path) => void (await writeFileAtomic(path, bytes)));
}

/**
 * Puts `bytes` at the manifest path `path` (below root/manifests) in one rename: staged and
 * fsynced in manifests/.ollama-compat-tmp, renamed over `path`, the folders fsynced. Readers see
 * the old manifest or the new one, never a mix or nothing.
 */
export async function writeManifest(root: string, path: string, bytes: Uint8Array | string): Promise<void> {
  const staging = manifestStaging(root);
  await mkdir(staging, { recursive: true });
  await sweepTempFiles(staging);
  const created = await mkdirFsynced(join(root, "manifests"), dirname(path));
  const staged = tempPathFor(join(staging, "manifest"));
  try {
    await writeFileAtomic(staged, bytes);
    await rename(staged, path);
    await fsyncDir(dirname(path));
    if (created) await fsyncDir(join(root, "manifests"));
  } finally {
    await rm(staged, { force: true }).catch(() => undefined);
  }
}

/**
 * Removes the manifest at `path`, fsyncs its folder, then removes the folders this left empty
 * up to manifests/ (as Ollama's PruneDirectory would at its next start).
 */
export async function removeManifest(root: string, path: string): Promise<void> {
  await unlink(path).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== "ENOENT") throw e;
  });
  await fsyncDir(dirname(path));
  const top = join(root, "manifests");
  for (let dir = dirname(path); dir !== top && dir.startsWith(top + sep); dir = dirname(dir)) {
    try {
      await rmdir(dir);
    } catch {
      break; // not empty (or gone): the folders above are not empty either
    }
  }
}

/** Removes staged files whose writer is gone (a SIGKILL mid-write), in both staging folders. */
export async function sweepStaging(root: string): Promise<string[]> {
  return [...(await sweepTempFiles(blobStaging(root))), ...(await sweepTempFiles(manifestStaging(root)))];
}

/** sha256 and size of a file, streamed. */
export async function hashFile(path: string): Promise<{ hex: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 22 })) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { hex: hash.digest("hex"), size };
}

/** fsync of a folder: makes the renames and unlinks in it durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** mkdir -p of `dir` below `top`, each new folder's parent fsynced; whether any was made. */
async function mkdirFsynced(top: string, dir: string): Promise<boolean> {
  const missing: string[] = [];
  for (let d = dir; d !== top && !relative(top, d).startsWith(".."); d = dirname(d)) {
    if (await stat(d).then(() => true, () => false)) break;
    missing.unshift(d);
  }
  if (missing.length === 0) return false;
  await mkdir(dir, { recursive: true });
  for (const d of missing) await fsyncDir(dirname(d));
  return true;
}

/** Names in a folder, or none when it does not exist. */
async function listDir(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => []);
}

// What pull, copy and delete add: blobs under a digest known in advance (checked before they get
// it), and manifests by model name.

/** The final path of a blob in the store at `root`. */
export function blobPathIn(root: string, digest: string): string {
  return join(root, "blobs", blobFileName(digest));
}

/**
 * `name` spelled as the store already spells it (Ollama's getExistingName, what create and pull
 * write to): each part that equals an installed name's part but for case takes that spelling,
 * so `Pirate` over an installed `pirate` replaces it instead of adding a second folder.
 */
export async function existingName(root: string, name: ModelName): Promise<ModelName> {
  const out = { ...name };
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  for (const e of await new ModelStore(root, {}).names()) {
    if (same(e.host, out.host)) out.host = e.host;
    if (same(e.namespace, out.namespace)) out.namespace = e.namespace;
    if (same(e.model, out.model)) out.model = e.model;
    if (same(e.tag, out.tag)) out.tag = e.tag;
  }
  return out;
}

/** The manifest path of `name` in the store at `root` (manifests/<host>/<namespace>/<model>/<tag>). */
export function manifestPathIn(root: string, name: ModelName): string {
  return join(root, "manifests", ...manifestSegments(name));
}

/**
 * Gives the finished file `staged` (a download's `-partial` file in blobs/, a name Ollama's
 * prune treats as garbage) its final blob name, after checking that it hashes to `digest`:
 * flushed, renamed, the folder flushed. On a mismatch the staged file is removed and
 * DIGEST_MISMATCH names `what` (e.g. the layer) and both digests.
 */
export async function installBlob(root: string, digest: string, staged: string, what: string): Promise<string> {
  const final = blobPathIn(root, digest);
  const actual = `sha256:${(await hashFile(staged)).hex}`;
  if (actual !== digest) {
    await rm(staged, { force: true });
    throw new StoreError("DIGEST_MISMATCH", `${what}: the bytes received hash to ${actual}, not ${digest}; nothing was kept`, { digest, actual });
  }
  const fh = await open(staged, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(staged, final);
  await fsyncDir(dirname(final));
  return final;
}

/** Adds `bytes` as a blob after checking them against `digest` (addBlobBytes, once they are known right). */
export async function writeBlobBytesChecked(root: string, digest: string, bytes: Uint8Array, what: string): Promise<string> {
  const actual = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  if (actual !== digest) throw new StoreError("DIGEST_MISMATCH", `${what}: the bytes received hash to ${actual}, not ${digest}; nothing was kept`, { digest, actual });
  return (await addBlobBytes(root, bytes)).path;
}

/**
 * An uploaded blob (`POST /api/blobs/:digest`): `body` streamed into blobs/.ollama-compat-tmp
 * while it is hashed, at most `maxBytes` of it, then fsynced and renamed to its content address
 * only when it hashes to `digest`. A blob already there is kept and the body not read; a body
 * too large, cut short or of another digest leaves nothing. Whether a new blob was written.
 */
export async function receiveBlob(root: string, digest: string, body: AsyncIterable<Uint8Array>, maxBytes: number): Promise<boolean> {
  const final = blobPathIn(root, digest);
  if ((await stat(final).catch(() => undefined))?.isFile()) return false;
  const staging = blobStaging(root);
  await mkdir(staging, { recursive: true });
  await sweepTempFiles(staging);
  const staged = tempPathFor(join(staging, "upload"));
  const hash = createHash("sha256");
  try {
    const fh = await open(staged, "wx", 0o644);
    try {
      let size = 0;
      for await (const chunk of body) {
        size += chunk.length;
        if (size > maxBytes) throw new StoreError("INVALID_CREATE", `the upload of ${digest} is larger than ${maxBytes} bytes, the most this server takes; nothing was kept`, { digest, maxBytes });
        hash.update(chunk);
        await fh.write(chunk);
      }
      await fh.sync();
    } finally {
      await fh.close();
    }
    const actual = `sha256:${hash.digest("hex")}`;
    if (actual !== canonicalDigest(digest)) throw new StoreError("DIGEST_MISMATCH", `digest mismatch, expected ${JSON.stringify(digest)}, got ${JSON.stringify(actual)}; nothing was kept`, { digest, actual });
    await rename(staged, final);
    await fsyncDir(dirname(final));
    return true;
  } finally {
    await rm(staged, { force: true }).catch(() => undefined);
  }
}

/** writeManifest at the name's path; the path. */
export async function writeModelManifest(root: string, name: ModelName, bytes: Uint8Array): Promise<string> {
  const path = manifestPathIn(root, name);
  await writeManifest(root, path, bytes);
  return path;
}

/**
 * The installed manifest of `name`, read as every manifest is (readManifestText: a regular file
 * of bounded size, opened without blocking), or UNKNOWN_MODEL when there is none.
 */
export async function readInstalledManifest(root: string, name: ModelName): Promise<{ path: string; text: string }> {
  const path = manifestPathIn(root, name);
  try {
    return { path, text: await readManifestText(path) };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new StoreError("UNKNOWN_MODEL", `model ${JSON.stringify(displayName(name))} is not installed (no manifest at ${path})`, { manifestPath: path });
    throw e;
  }
}

/** `ollama cp`: the source manifest's bytes under a second name (the blobs are shared). */
export async function copyModel(root: string, source: ModelName, destination: ModelName): Promise<string> {
  const { text } = await readInstalledManifest(root, source);
  return writeModelManifest(root, destination, Buffer.from(text, "utf8"));
}

/**
 * `ollama rm`: removes the model's manifest (and the folders it leaves empty), then each of its
 * blobs that no other manifest names, as Ollama's DeleteHandler does, except those `keep` holds
 * (a running server still reads them). Returns the blobs removed.
 */
export async function deleteModel(root: string, name: ModelName, keep?: (digest: string) => boolean): Promise<string[]> {
  const { path, text } = await readInstalledManifest(root, name);
  await removeManifest(root, path);
  return removeUnreferenced(root, digestsOf(text), keep);
}

/**
 * Removes each of `digests` that no manifest of the store names and `keep` does not hold (a blob
 * a running server still reads); returns those removed.
 */
export async function removeUnreferenced(root: string, digests: readonly string[], keep?: (digest: string) => boolean): Promise<string[]> {
  const store = new ModelStore(root, {});
  const used = new Set<string>();
  for (const other of await store.names()) {
    const t = await readManifestText(store.manifestPath(other)).catch(() => undefined);
    // a manifest that cannot be read keeps every blob: better a blob too many than one missing
    if (t === undefined) return [];
    for (const d of digestsOf(t)) used.add(d);
  }
  const removed: string[] = [];
  for (const d of new Set(digests)) {
    if (used.has(d) || keep?.(d)) continue;
    await rm(blobPathIn(root, d), { force: true });
    removed.push(d);
  }
  return removed;
}

/** The digests the manifest at `path` names; none when there is none (or it is not one). */
export async function manifestDigests(path: string): Promise<string[]> {
  return digestsOf(await readManifestText(path).catch(() => ""));
}

/** The digests a manifest names (config and layers); none when it is not one. */
function digestsOf(text: string): string[] {
  try {
    const m = JSON.parse(text) as { config?: { digest?: unknown }; layers?: Array<{ digest?: unknown }> };
    return [m.config?.digest, ...(Array.isArray(m.layers) ? m.layers.map((l) => l?.digest) : [])].filter((d): d is string => typeof d === "string" && canonicalDigest(d) !== undefined);
  } catch {
    return [];
  }
}
