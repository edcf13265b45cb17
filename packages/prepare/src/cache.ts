import { createHash } from "node:crypto";
import { mkdir, open, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { acquireLock, FilesError, isSystemError, lockedByLive, tempFileOwner, tempPathFor, whyNotWritable } from "@compat/files";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { canonicalDigest } from "@compat/store";
import { DigestMemo, sameVersion, versionOf, type FileVersion, type SourceFile } from "./digest-memo";
import { PrepareError } from "./errors";

/**
 * The key of a translated file, the cache's entries and the mount's sidecars alike: what it is
 * made from (the source's digest, or for the mount a plain file's identity), by which
 * translator, profile and kind. 40 hex digits (160 bits) of a sha256: far beyond any chance of
 * two sources meeting in one machine's cache, short enough for paths, and the length every
 * existing cache entry is stored under (a full 64 would orphan them all).
 */
export function contentKey(id: { source: string; translator: string; profile: string; kind: CacheKind }): string {
  const text = JSON.stringify({ v: 1, source: id.source, translator: id.translator, profile: id.profile, kind: id.kind });
  return createHash("sha256").update(text).digest("hex").slice(0, 40);
}

declare const __HANDLERS_VERSION__: string | undefined;
/** Part of every cache key: a new translator release never reuses an old entry. */
export const TRANSLATOR_VERSION = `handlers@${typeof __HANDLERS_VERSION__ === "string" ? __HANDLERS_VERSION__ : "dev"}`;

export type CacheKind = "text" | "mmproj";

export interface CacheOptions {
  /** Default `$OLLAMA_COMPAT_CACHE/translated`, else `$XDG_CACHE_HOME/ollama-compat/translated`, else `~/.cache/ollama-compat/translated`. */
  dir?: string;
  /** Evict least-recently-used entries beyond this many bytes. Default `$OLLAMA_COMPAT_CACHE_MAX_BYTES`, else 64 GiB. */
  maxBytes?: number;
  /** Translation profile; part of the key. Default "native". */
  profile?: TranslationProfile;
  /** Default TRANSLATOR_VERSION. */
  translatorVersion?: string;
  /** How long to wait for another process's lock on the same entry. Default 30 minutes. */
  lockTimeoutMs?: number;
  /**
   * A lock whose owner this machine cannot check (another pid namespace, a lock of an older
   * version) is taken over when it has not been refreshed for this long. Default 60 s (owners
   * refresh every 5 s).
   */
  lockStaleMs?: number;
  env?: Record<string, string | undefined>;
}

export interface ObtainOptions {
  /**
   * The `sha256:<hex>` the source should have (a store blob's name). The cache keys on the
   * digest of the source's bytes as they are (hashed once per version of the file, see
   * DigestMemo); when that is not this one, the source is damaged or replaced and nothing is
   * translated (DIGEST_MISMATCH).
   */
  sourceDigest?: string;
  signal?: AbortSignal;
  /** Bytes written so far, while a new entry is written. */
  onProgress?(written: number, total: number): void;
  /** Why we wait, while another process holds the entry's lock (once, then every minute). */
  onWait?(line: string): void;
  /** Called once when no verified entry is there: this call will write one (or wait for the process writing it). */
  onMiss?(): void;
}

export interface CacheEntry {
  key: string;
  path: string;
  size: number;
  /** true: it was already there and verified; false: written now. */
  hit: boolean;
}

interface EntryMeta {
  version: 1;
  key: string;
  kind: CacheKind;
  source: string;
  sourceDigest: string;
  translator: string;
  profile: string;
  size: number;
  /** Bytes of the GGUF header (KVs + tensor table + padding) that headerSha256 covers. */
  headerLength: number;
  headerSha256: string;
  created: string;
}

const ENTRY_FILE = "model.gguf";
const META_FILE = "entry.json";
const DEFAULT_MAX = 64 * 1024 ** 3;

export function defaultCacheDir(env: Record<string, string | undefined> = process.env): string {
  if (env.OLLAMA_COMPAT_CACHE) return join(env.OLLAMA_COMPAT_CACHE, "translated");
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "ollama-compat", "translated");
}

/**
 * A content-addressed store of translated GGUFs: key = (digest of the source's bytes,
 * translator version, profile, kind). The digest is of the bytes the translation reads, hashed
 * once per version of the source file (DigestMemo): a blob damaged or replaced under its name
 * gets no entry (DIGEST_MISMATCH), and two files with the same name and other bytes never
 * share one. An entry is written by the view's own writer into a private staging directory
 * and renamed into place, under a per-key lock file, so concurrent launches translate once and
 * a killed writer never leaves a half entry behind.
 */
export class TranslationCache {
  readonly dir: string;
  readonly maxBytes: number;
  readonly profile: TranslationProfile;
  readonly translatorVersion: string;
  private readonly lockTimeoutMs: number;
  private readonly lockStaleMs: number;
  private readonly digests: DigestMemo;

  constructor(opts: CacheOptions = {}) {
    const env = opts.env ?? process.env;
    this.dir = opts.dir ?? defaultCacheDir(env);
    const fromEnv = Number(env.OLLAMA_COMPAT_CACHE_MAX_BYTES);
    this.maxBytes = opts.maxBytes ?? (Number.isFinite(fromEnv) && fromEnv > 0 ? fromEnv : DEFAULT_MAX);
    this.profile = opts.profile ?? "native";
    this.translatorVersion = opts.translatorVersion ?? TRANSLATOR_VERSION;
    this.lockTimeoutMs = opts.lockTimeoutMs ?? 30 * 60_000;
    this.lockStaleMs = opts.lockStaleMs ?? 60_000;
    this.digests = new DigestMemo(join(this.dir, "digests"));
  }

  keyFor(sourceDigest: string, kind: CacheKind): string {
    return contentKey({ source: sourceDigest, translator: this.translatorVersion, profile: this.profile, kind });
  }

  entryDir(key: string): string {
    return join(this.dir, "entries", key);
  }

  /**
   * The cached translation of `sourcePath` (`view` is its lazy translation): verified and
   * reused if present, else written once. The view is not closed here.
   *
   * The key is the digest of the source's bytes. A version of the file hashed before is found
   * by one fstat; a new one is hashed on another thread, and when the source says what its
   * digest should be (a store blob's name), the entry is looked up, or written, under that
   * digest meanwhile: nothing is served or published before the hash agrees.
   */
  async obtain(sourcePath: string, kind: CacheKind, view: TranslatedView, opts: ObtainOptions = {}): Promise<CacheEntry> {
    const source = sourceOf(sourcePath, view);
    // Whatever writers killed earlier left behind goes first, hit or miss.
    await this.sweepLeftovers();
    const version = await versionOf(source);
    const known = await this.digests.recall(version);
    const claimed = opts.sourceDigest !== undefined ? normalizeDigest(opts.sourceDigest) : undefined;
    const hashing = known === undefined ? this.digests.hash(source.path, version, opts.signal) : undefined;
    try {
      const sourceDigest = known ?? claimed ?? (await hashing!.digest);
      const confirm = async () => checkClaim(source.path, known ?? (await hashing!.digest), claimed);
      if (known !== undefined) await confirm();
      const key = this.keyFor(sourceDigest, kind);
      const headerSha256 = sha256(view.layout.header);
      const expect = { size: view.size, headerSha256 };

      const found = await this.verified(key, expect);
      if (found) {
        await confirm();
        return found;
      }
      opts.onMiss?.();

      try {
        await mkdir(join(this.dir, "locks"), { recursive: true });
        const what = `cache entry ${key} (${kind} of ${source.path})`;
        const release = await acquireLock(this.lockPath(key), {
          timeoutMs: this.lockTimeoutMs,
          staleMs: this.lockStaleMs,
          signal: opts.signal,
          what,
          ...(opts.onWait ? { onWait: opts.onWait } : {}),
        }).catch((e: unknown) => {
          if (!(e instanceof FilesError)) throw e;
          if (e.code === "ABORTED") throw aborted(what);
          throw e.code === "LOCK_TIMEOUT" ? new PrepareError("CACHE_LOCK_TIMEOUT", e.message, e.details) : e;
        });
        try {
          // Someone else may have written it while we waited.
          const again = await this.verified(key, expect);
          if (again) {
            await confirm();
            return again;
          }
          await this.write(key, view, source, version, confirm, {
            version: 1,
            key,
            kind,
            source: sourcePath,
            sourceDigest,
            translator: this.translatorVersion,
            profile: this.profile,
            size: view.size,
            headerLength: view.layout.header.length,
            headerSha256,
            created: new Date().toISOString(),
          }, opts);
        } finally {
          await release();
        }
      } catch (e) {
        throw await this.unwritable(e);
      }
      await this.evict(key);
      return { key, path: join(this.entryDir(key), ENTRY_FILE), size: view.size, hit: false };
    } finally {
      hashing?.cancel();
    }
  }

  /** Entries with their sizes and last use, oldest first. */
  async entries(): Promise<Array<{ key: string; size: number; lastUsed: number; meta?: EntryMeta }>> {
    const base = join(this.dir, "entries");
    let names: string[];
    try {
      names = await readdir(base);
    } catch {
      return [];
    }
    const out: Array<{ key: string; size: number; lastUsed: number; meta?: EntryMeta }> = [];
    for (const key of names) {
      const metaPath = join(base, key, META_FILE);
      try {
        const st = await stat(metaPath);
        const meta = JSON.parse(await readFile(metaPath, "utf8")) as EntryMeta;
        out.push({ key, size: meta.size, lastUsed: st.mtimeMs, meta });
      } catch {
        out.push({ key, size: 0, lastUsed: 0 });
      }
    }
    return out.sort((a, b) => a.lastUsed - b.lastUsed);
  }

  /**
   * Whether a verified entry exists for this view's source (`ls` says "cached"), without
   * reading the source: by the digest remembered for its current version, else (a version not
   * hashed yet) by `sourceDigest`, the name it claims, which the next `obtain` checks. A
   * remembered digest that is not the claimed one is DIGEST_MISMATCH, as obtain would say.
   */
  async has(view: TranslatedView, kind: CacheKind, sourceDigest?: string): Promise<boolean> {
    const source = sourceOf(view.source.source?.name ?? "", view);
    if (source.fd === undefined && source.path === "") return false;
    const known = await this.digests.recall(await versionOf(source));
    if (known) checkClaim(source.path, known, sourceDigest);
    const digest = known ?? (sourceDigest !== undefined ? normalizeDigest(sourceDigest) : undefined);
    if (digest === undefined) return false;
    return (await this.peek(this.keyFor(digest, kind), { size: view.size, headerSha256: sha256(view.layout.header) })) !== undefined;
  }

  /** Removes least-recently-used entries until the total fits maxBytes; never `keep` or a locked one. */
  async evict(keep?: string): Promise<string[]> {
    const all = await this.entries();
    let total = all.reduce((s, e) => s + e.size, 0);
    const removed: string[] = [];
    for (const e of all) {
      if (total <= this.maxBytes) break;
      if (e.key === keep || (await lockedByLive(this.lockPath(e.key), this.lockStaleMs))) continue;
      await rm(this.entryDir(e.key), { recursive: true, force: true });
      total -= e.size;
      removed.push(e.key);
    }
    return removed;
  }

  private async peek(key: string, expect: { size: number; headerSha256: string }): Promise<CacheEntry | undefined> {
    const dir = this.entryDir(key);
    const path = join(dir, ENTRY_FILE);
    try {
      const meta = JSON.parse(await readFile(join(dir, META_FILE), "utf8")) as EntryMeta;
      if (meta.size !== expect.size || meta.headerSha256 !== expect.headerSha256) return undefined;
      if ((await stat(path)).size !== expect.size) return undefined;
      // The written header must be exactly the view's header: same KVs, same tensor table.
      const fh = await open(path, "r");
      try {
        const header = Buffer.alloc(Math.min(expect.size, meta.headerLength));
        await fh.read(header, 0, header.length, 0);
        if (sha256(header) !== expect.headerSha256) return undefined;
      } finally {
        await fh.close();
      }
      return { key, path, size: expect.size, hit: true };
    } catch {
      return undefined;
    }
  }

  private async verified(key: string, expect: { size: number; headerSha256: string }): Promise<CacheEntry | undefined> {
    const hit = await this.peek(key, expect);
    if (hit) {
      const now = new Date();
      await utimes(join(this.entryDir(key), META_FILE), now, now).catch(() => undefined);
    }
    return hit;
  }

  /** Writes the entry into staging and renames it into place once `confirm` (the source's digest is what the key says) holds. */
  private async write(key: string, view: TranslatedView, source: SourceFile, version: FileVersion, confirm: () => Promise<void>, meta: EntryMeta, opts: ObtainOptions): Promise<void> {
    const tmpBase = join(this.dir, "tmp");
    await mkdir(tmpBase, { recursive: true });
    const staging = tempPathFor(join(tmpBase, key));
    await mkdir(staging);
    try {
      if (opts.signal?.aborted) throw aborted(meta.source);
      try {
        await view.writeTo(join(staging, ENTRY_FILE), { signal: opts.signal, onProgress: opts.onProgress });
      } catch (e) {
        if (opts.signal?.aborted) throw aborted(meta.source);
        throw e;
      }
      if (opts.signal?.aborted) throw aborted(meta.source);
      // The digest names the bytes of `version`: a source written to meanwhile gave other bytes.
      if (!sameVersion(version, await versionOf(source))) {
        throw new PrepareError("SOURCE_CHANGED", `${source.path} changed while it was translated; nothing was cached (run again once it is complete)`, { source: source.path });
      }
      await confirm();
      await writeFile(join(staging, META_FILE), JSON.stringify(meta, null, 2) + "\n");
      await mkdir(join(this.dir, "entries"), { recursive: true });
      const dest = this.entryDir(key);
      await rm(dest, { recursive: true, force: true }); // a stale entry that failed verification
      await rename(staging, dest);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }

  /**
   * What killed writers left: their staging directories (`tmp/.<key>.<pid>.<hex>.tmp`, written
   * only under the key's lock, so garbage once no live owner holds it), their lock files (a
   * writer killed after its rename, before its unlock, would otherwise keep its entry from
   * ever being evicted) and digest memo temp files; and the digest memo of earlier versions.
   */
  private async sweepLeftovers(): Promise<void> {
    const tmpBase = join(this.dir, "tmp");
    for (const name of await readdir(join(this.dir, "locks")).catch(() => [] as string[])) {
      if (name.endsWith(".lock")) await lockedByLive(join(this.dir, "locks", name), this.lockStaleMs);
    }
    for (const name of await readdir(tmpBase).catch(() => [] as string[])) {
      const key = tempFileOwner(name)?.base ?? name.split(".")[0]!;
      if (!(await lockedByLive(this.lockPath(key), this.lockStaleMs))) await rm(join(tmpBase, name), { recursive: true, force: true });
    }
    await this.digests.sweep();
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (/^digests\.json(\.\d+\.tmp)?$/.test(name)) await rm(join(this.dir, name), { force: true });
    }
  }

  private lockPath(key: string): string {
    return join(this.dir, "locks", `${key}.lock`);
  }

  /** A failure to create or write the cache folder, in words (the folder, and why: read-only, not a folder, no permission). */
  private async unwritable(e: unknown): Promise<unknown> {
    if (!isSystemError(e)) return e;
    return new PrepareError("CACHE_UNWRITABLE", `cannot write the translation cache ${this.dir}: ${await whyNotWritable(e.path ?? this.dir, e)}; choose another cache folder`, {
      dir: this.dir,
      code: e.code,
    });
  }

  /**
   * sha256 of a file's bytes, remembered per version of the file (DigestMemo), so a file is read
   * in full once, not at every launch.
   */
  async fileDigest(path: string, signal?: AbortSignal): Promise<string> {
    return (await this.digests.digest({ path }, signal)).digest;
  }
}

/** The file the view reads its tensor bytes from: its open descriptor when it has one, so the digest is of those very bytes. */
function sourceOf(path: string, view: TranslatedView): SourceFile {
  const fd = view.source.source?.fd;
  return { path, ...(fd !== undefined ? { fd } : {}) };
}

/** A digest as the cache keys it (`sha256:<lower-case hex>`); a string that is no sha256 digest is kept as it is. */
function normalizeDigest(d: string): string {
  return canonicalDigest(d) ?? d;
}

/** The bytes must be what the name says: a blob damaged on disk, or other bytes under a copied name, is not translated. */
function checkClaim(path: string, actual: string, claimed: string | undefined): void {
  if (claimed === undefined || normalizeDigest(claimed) === actual) return;
  throw new PrepareError(
    "DIGEST_MISMATCH",
    `${path} hashes to ${actual}, not the ${normalizeDigest(claimed)} its name says: the blob is damaged or was replaced (pull the model again); nothing was translated`,
    { path, digest: normalizeDigest(claimed), actual },
  );
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

function aborted(what: string): PrepareError {
  return new PrepareError("TRANSLATION_ABORTED", `translation of ${what} was stopped; no cache entry was left behind`, { source: what });
}
