import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readdir, readFile, realpath, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { processAlive, sweepTempFiles, tempPathFor, writeFileAtomic } from "@compat/gguf";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { BridgeError } from "./errors";

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
  env?: Record<string, string | undefined>;
}

export interface ObtainOptions {
  /** `sha256:<hex>` of the source when known (store blobs); plain files are digested (and remembered). */
  sourceDigest?: string;
  signal?: AbortSignal;
  /** Bytes written so far, while a new entry is written. */
  onProgress?(written: number, total: number): void;
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
 * A content-addressed store of translated GGUFs: key = (source digest, translator version,
 * profile, kind). An entry is written by the view's own writer into a private staging
 * directory and renamed into place, under a per-key lock file, so concurrent launches
 * translate once and a killed writer never leaves a half entry behind.
 */
export class TranslationCache {
  readonly dir: string;
  readonly maxBytes: number;
  readonly profile: TranslationProfile;
  readonly translatorVersion: string;
  private readonly lockTimeoutMs: number;

  constructor(opts: CacheOptions = {}) {
    const env = opts.env ?? process.env;
    this.dir = opts.dir ?? defaultCacheDir(env);
    const fromEnv = Number(env.OLLAMA_COMPAT_CACHE_MAX_BYTES);
    this.maxBytes = opts.maxBytes ?? (Number.isFinite(fromEnv) && fromEnv > 0 ? fromEnv : DEFAULT_MAX);
    this.profile = opts.profile ?? "native";
    this.translatorVersion = opts.translatorVersion ?? TRANSLATOR_VERSION;
    this.lockTimeoutMs = opts.lockTimeoutMs ?? 30 * 60_000;
  }

  keyFor(sourceDigest: string, kind: CacheKind): string {
    const id = JSON.stringify({ v: 1, source: sourceDigest, translator: this.translatorVersion, profile: this.profile, kind });
    return createHash("sha256").update(id).digest("hex").slice(0, 40);
  }

  entryDir(key: string): string {
    return join(this.dir, "entries", key);
  }

  /**
   * The cached translation of `sourcePath` (`view` is its lazy translation): verified and
   * reused if present, else written once. The view is not closed here.
   */
  async obtain(sourcePath: string, kind: CacheKind, view: TranslatedView, opts: ObtainOptions = {}): Promise<CacheEntry> {
    const sourceDigest = opts.sourceDigest ?? (await this.fileDigest(sourcePath, opts.signal));
    const key = this.keyFor(sourceDigest, kind);
    const headerSha256 = sha256(view.layout.header);
    const expect = { size: view.size, headerSha256 };

    // Whatever writers killed earlier left behind goes first, hit or miss.
    await this.sweepLeftovers();
    const found = await this.verified(key, expect);
    if (found) return found;

    await mkdir(join(this.dir, "locks"), { recursive: true });
    const release = await this.lock(key, opts.signal);
    try {
      // Someone else may have written it while we waited.
      const again = await this.verified(key, expect);
      if (again) return again;
      await this.write(key, view, {
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
    await this.evict(key);
    return { key, path: join(this.entryDir(key), ENTRY_FILE), size: view.size, hit: false };
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

  /** Whether a verified entry exists for this source (used by `ls` to say "cached"). */
  async has(sourceDigest: string, kind: CacheKind, view: TranslatedView): Promise<boolean> {
    return (await this.peek(this.keyFor(sourceDigest, kind), { size: view.size, headerSha256: sha256(view.layout.header) })) !== undefined;
  }

  /** Removes least-recently-used entries until the total fits maxBytes; never `keep` or a locked one. */
  async evict(keep?: string): Promise<string[]> {
    const all = await this.entries();
    let total = all.reduce((s, e) => s + e.size, 0);
    const removed: string[] = [];
    for (const e of all) {
      if (total <= this.maxBytes) break;
      if (e.key === keep || (await this.lockedByLive(e.key))) continue;
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

  private async write(key: string, view: TranslatedView, meta: EntryMeta, opts: ObtainOptions): Promise<void> {
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
   * What killed writers left: their staging directories (`tmp/.<key>.<pid>.<hex>.tmp`), their
   * lock files (a writer killed after its rename, before its unlock, would otherwise keep
   * its entry from ever being evicted) and their digest memo temp files. Only files of
   * processes that are gone are touched (@compat/gguf's sweepTempFiles, the one sweep).
   */
  private async sweepLeftovers(): Promise<void> {
    await sweepTempFiles(join(this.dir, "tmp"));
    for (const name of await readdir(join(this.dir, "locks")).catch(() => [] as string[])) {
      if (name.endsWith(".lock")) await this.removeStaleLock(join(this.dir, "locks", name));
    }
    await sweepTempFiles(this.dir, "digests.json");
  }

  /** Removes a lock file whose owner process is gone; true if it did. */
  private async removeStaleLock(path: string): Promise<boolean> {
    const owner = Number((await readFile(path, "utf8").catch(() => "")).split(" ")[0]);
    if (!dead(owner)) return false;
    await rm(path, { force: true });
    return true;
  }

  private async lockedByLive(key: string): Promise<boolean> {
    return (await exists(this.lockPath(key))) && !(await this.removeStaleLock(this.lockPath(key)));
  }

  private lockPath(key: string): string {
    return join(this.dir, "locks", `${key}.lock`);
  }

  /** An exclusive lock file holding our pid; a lock whose owner died is taken over. */
  private async lock(key: string, signal?: AbortSignal): Promise<() => Promise<void>> {
    const path = this.lockPath(key);
    const deadline = Date.now() + this.lockTimeoutMs;
    const token = `${process.pid} ${randomBytes(6).toString("hex")}`;
    for (;;) {
      if (signal?.aborted) throw aborted(key);
      try {
        await writeFile(path, token, { flag: "wx" });
        return async () => {
          const now = await readFile(path, "utf8").catch(() => "");
          if (now === token) await rm(path, { force: true });
        };
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      if (await this.removeStaleLock(path)) continue;
      const owner = Number((await readFile(path, "utf8").catch(() => "")).split(" ")[0]);
      if (Date.now() > deadline) {
        throw new BridgeError("CACHE_LOCK_TIMEOUT", `cache entry ${key} is locked by pid ${owner} for more than ${this.lockTimeoutMs} ms (${path})`, { path });
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * sha256 of a plain file, remembered by (path, size, mtime, inode) so a file is read
   * in full once, not at every launch.
   */
  async fileDigest(path: string, signal?: AbortSignal): Promise<string> {
    const real = await realpath(path);
    const st = await stat(real);
    const id = `${real}\0${st.size}\0${st.mtimeMs}\0${st.ino}`;
    const memoPath = join(this.dir, "digests.json");
    const memo = (await readFile(memoPath, "utf8").then((t) => JSON.parse(t) as Record<string, string>).catch(() => ({}))) as Record<string, string>;
    if (memo[id]) return memo[id];
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(real, { signal })) hash.update(chunk as Buffer);
    const digest = `sha256:${hash.digest("hex")}`;
    memo[id] = digest;
    await mkdir(this.dir, { recursive: true });
    await writeFileAtomic(memoPath, JSON.stringify(memo));
    return digest;
  }
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** A lock owner's pid of a process that no longer exists; not ours, not garbage. */
function dead(pid: number): boolean {
  return Number.isInteger(pid) && pid > 0 && pid !== process.pid && !processAlive(pid);
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

function aborted(what: string): BridgeError {
  return new BridgeError("TRANSLATION_ABORTED", `translation of ${what} was stopped; no cache entry was left behind`, { source: what });
}
