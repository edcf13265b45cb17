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
 * TranslatedView.writeTo or writeFileAtomic). The result is hashed and renamed to its
 * content address; an existing blob of the same digest and size is kept and the copy dropped.
 */
export async function addBlob(root: string, produce: (path: string) => Promise<void>): Promise<WrittenBlob> {
  const staging = blobStaging(root);
  await mkdir(staging, { recursive: true });
  await sweepTempFiles(staging);
  const staged = tempPathFor(join(staging, "blob"));
  try {
    await produce(staged);
    const { hex, size } = await hashFile(staged);
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
export async function listDir(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => []);
}
