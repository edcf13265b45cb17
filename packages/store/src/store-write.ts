/**
 * Writing into Ollama's store without ever showing a half-made thing: a blob gets its final
 * name `blobs/sha256-<hex>` only once its bytes hash to that digest and are on disk, and a
 * manifest replaces its path in one rename. Whoever adds to the store (pull, and later
 * migrate, copy, create) writes through these, so a crash leaves only names Ollama's prune
 * treats as garbage.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, rename, rm, rmdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { writeFileAtomic } from "@compat/files";
import { StoreError } from "./errors";
import { displayName, manifestSegments, type ModelName } from "./name";
import { ModelStore } from "./store";

const DIGEST = /^sha256[:-]([0-9a-f]{64})$/;

/** `sha256:<hex>` → `sha256-<hex>`, the blob's file name; anything else is refused. */
export function blobFileName(digest: string): string {
  const m = DIGEST.exec(digest);
  if (!m) throw new StoreError("CORRUPT_MANIFEST", `"${digest}" is not a sha256 digest (sha256:<64 lower-case hex digits>)`, { digest });
  return `sha256-${m[1]}`;
}

/** The final path of a blob in the store at `root`. */
export function blobPathIn(root: string, digest: string): string {
  return join(root, "blobs", blobFileName(digest));
}

/** The manifest path of `name` in the store at `root` (manifests/<host>/<namespace>/<model>/<tag>). */
export function manifestPathIn(root: string, name: ModelName): string {
  return join(root, "manifests", ...manifestSegments(name));
}

/** sha256 of a file, streamed. */
export async function fileSha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 4 << 20 })) hash.update(chunk as Buffer);
  return `sha256:${hash.digest("hex")}`;
}

/**
 * Gives the finished file `staged` (in the same folder as the blobs) its final blob name, after
 * checking that it hashes to `digest`: flushed, renamed, the folder flushed. On a mismatch the
 * staged file is removed and DIGEST_MISMATCH names `what` (e.g. the layer) and both digests.
 */
export async function installBlob(root: string, digest: string, staged: string, what: string): Promise<string> {
  const final = blobPathIn(root, digest);
  const actual = await fileSha256(staged);
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
  await syncDir(dirname(final));
  return final;
}

/** Writes `bytes` as a blob after checking them against `digest`; atomic. */
export async function writeBlobBytes(root: string, digest: string, bytes: Uint8Array, what: string): Promise<string> {
  const actual = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  if (actual !== digest) throw new StoreError("DIGEST_MISMATCH", `${what}: the bytes received hash to ${actual}, not ${digest}; nothing was kept`, { digest, actual });
  const final = blobPathIn(root, digest);
  await mkdir(dirname(final), { recursive: true });
  await writeFileAtomic(final, bytes);
  return final;
}

/** Writes a manifest's exact bytes at the name's path, atomically (the last step of adding a model). */
export async function writeManifest(root: string, name: ModelName, bytes: Uint8Array): Promise<string> {
  const path = manifestPathIn(root, name);
  await mkdir(dirname(path), { recursive: true });
  await writeFileAtomic(path, bytes);
  await syncDir(dirname(path));
  return path;
}

/** A rename is durable once its folder is flushed. */
async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } catch {
    // some file systems refuse fsync on a directory; the rename itself has happened
  } finally {
    await fh.close();
  }
}

/** `ollama cp`: the source manifest's bytes under a second name (the blobs are shared). */
export async function copyModel(root: string, source: ModelName, destination: ModelName): Promise<string> {
  const from = manifestPathIn(root, source);
  let bytes: Buffer;
  try {
    bytes = await readFile(from);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new StoreError("UNKNOWN_MODEL", `model ${JSON.stringify(displayName(source))} is not installed (no manifest at ${from})`, { manifestPath: from });
    throw e;
  }
  return writeManifest(root, destination, bytes);
}

/**
 * `ollama rm`: removes the model's manifest (and the folders it leaves empty), then each of its
 * blobs that no other manifest names, as Ollama's DeleteHandler does. Returns the blobs removed.
 */
export async function deleteModel(root: string, name: ModelName): Promise<string[]> {
  const path = manifestPathIn(root, name);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new StoreError("UNKNOWN_MODEL", `model ${JSON.stringify(displayName(name))} is not installed (no manifest at ${path})`, { manifestPath: path });
    throw e;
  }
  const mine = digestsOf(text);
  await rm(path);
  // the host/namespace/model folders it leaves empty go too (rmdir refuses a folder that is not)
  for (let dir = dirname(path), depth = 0; depth < 3; dir = dirname(dir), depth++) {
    if (!(await rmdir(dir).then(() => true, () => false))) break;
  }
  return removeUnreferenced(root, mine);
}

/** Removes each of `digests` that no manifest of the store names; returns those removed. */
export async function removeUnreferenced(root: string, digests: readonly string[]): Promise<string[]> {
  const store = new ModelStore(root, {});
  const used = new Set<string>();
  for (const other of await store.names()) {
    const t = await readFile(store.manifestPath(other), "utf8").catch(() => undefined);
    // a manifest that cannot be read keeps every blob: better a blob too many than one missing
    if (t === undefined) return [];
    for (const d of digestsOf(t)) used.add(d);
  }
  const removed: string[] = [];
  for (const d of new Set(digests)) {
    if (used.has(d)) continue;
    await rm(blobPathIn(root, d), { force: true });
    removed.push(d);
  }
  return removed;
}

/** The digests the manifest at `path` names; none when there is none (or it is not one). */
export async function manifestDigests(path: string): Promise<string[]> {
  return digestsOf(await readFile(path, "utf8").catch(() => ""));
}

/** The digests a manifest names (config and layers); none when it is not one. */
function digestsOf(text: string): string[] {
  try {
    const m = JSON.parse(text) as { config?: { digest?: unknown }; layers?: Array<{ digest?: unknown }> };
    return [m.config?.digest, ...(Array.isArray(m.layers) ? m.layers.map((l) => l?.digest) : [])].filter((d): d is string => typeof d === "string" && DIGEST.test(d));
  } catch {
    return [];
  }
}
