import { watch, type FSWatcher } from "node:fs";
import { access, constants, mkdir, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { readTensorData } from "@compat/gguf";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { isSystemError, whyNotWritable } from "@compat/files";
import {
  erofsChunks,
  erofsMountFolder,
  erofsSupport,
  FuseMount,
  MountError,
  mountErofs,
  planView,
  probeErofs,
  SidecarStore,
  sweepErofsMounts,
  wholeFilePlan,
  writeErofsImage,
  type ComputedPart,
  type ErofsMount,
  type FilePlan,
  type MountExit,
} from "@compat/mount";
import { activeBackend } from "@compat/tensor-ops";
import { contentKey, defaultCacheDir, TRANSLATOR_VERSION } from "./cache";
import { versionNow } from "./digest-memo";
import { FactsRecords, factsOf, preparedFromFacts, servedAsIs, type RecordedFacts } from "./model-facts";
import { PrepareError } from "./errors";
import { modelFiles, type ModelsLayout } from "./layout";
import { preparedModel, servedViews, type ModelPreparer, type PreparedModel, type ServedViews } from "./preparer";
import { blobDigest, byName, displayName, ModelStore, type ResolvedModel, type StoreError } from "@compat/store";

export interface StoreMountOptions {
  /** The mount point (created if missing; must be empty). */
  dir: string;
  /** The store to show: a ModelStore or its root (default $OLLAMA_MODELS or ~/.ollama/models). */
  store?: ModelStore | string;
  /** Default `models-dir` (llama-server --models-dir); `lmstudio` for LM Studio's folder. */
  layout?: ModelsLayout;
  /** Translation profile (default native). */
  profile?: TranslationProfile;
  /** Where computed tensors are kept. Default `sidecars/` beside the translation cache. */
  sidecarDir?: string;
  /** Show every installed model (default), or only these (references or GGUF paths). */
  models?: "all" | readonly string[];
  /** Let other users read the mount (FUSE allow_other). */
  allowOther?: boolean;
  /**
   * Models added to or removed from the store are seen at once where its folders can be watched
   * (inotify); this is how often it is checked where they cannot (default 2000 ms), and every 30
   * times that where they can, in case an event was lost. 0: never (nor watched).
   */
  rescanMs?: number;
  /**
   * If the daemon dies (killed, crashed), mount the store again at the same folder, so paths
   * handed out (a router's presets) keep working; `exited` then resolves only when that fails
   * or the mount is closed. Default false: the mount is gone with its daemon.
   */
  restart?: boolean;
  /** Stops the first scan of `open` (a store of thousands of models takes a while): open then fails with the abort. */
  signal?: AbortSignal;
  env?: Record<string, string | undefined>;
  /**
   * Serve translated files from kernel EROFS mounts where this machine allows it (root, a kernel
   * with file-backed EROFS): default true; OLLAMA_COMPAT_EROFS=0 turns it off too. See StoreMount.
   */
  erofs?: boolean;
  /** Where the EROFS images and mounts are kept. Default `erofs/` beside the sidecar folder (on its file system: the probe mounts there). */
  erofsDir?: string;
  /** One line per model mounted, removed or not mounted, and the daemon's warnings. */
  onStatus?(line: string): void;
  /**
   * How many models' parsed views stay open between the fills of their computed tensors
   * (default 2; each is closed after a few seconds unused). 0 opens and parses the file again
   * for every tensor.
   */
  viewsKept?: number;
  /**
   * Plan models when they are first used (serve): a model whose facts are recorded in this
   * folder (FactsRecords) is shown to prepare() at once, from the record, and its header is
   * parsed and planned when `ready` is asked for it; the others are planned as they are found,
   * and their facts recorded. Unset: every model is planned as it is found (what `mount` needs:
   * its files must be there when the mount is).
   */
  factsDir?: string;
  /**
   * The store as listStore listed it a moment ago (a serve's router lists it before the mount
   * starts): the first scan works from it rather than reading the store again. Later rescans read it.
   */
  listed?: Promise<StoreListing>;
}

/** One model as the mount shows it. */
export interface MountedModel {
  name: string;
  /** Relative to the mount point. */
  files: { model: string; mmproj?: string };
  /** What llama-server needs to serve it from the mount (modelArgs). */
  prepared: PreparedModel;
  /**
   * Set when nothing of it is translated (its files are links to the store's): the files
   * themselves, which a serve hands llama-server without the mount.
   */
  asIs?: { model: string; mmproj?: string };
}

/** `model-facts/` beside the translation cache's folder: what serve remembers of each model's header. */
export function defaultFactsDir(env: Record<string, string | undefined> = process.env): string {
  return join(dirname(defaultCacheDir(env)), "model-facts");
}

/** `sidecars/` beside the translation cache's folder. */
export function defaultSidecarDir(env: Record<string, string | undefined> = process.env): string {
  return join(dirname(defaultCacheDir(env)), "sidecars");
}

/** What identifies a model's files in the store: its manifest's bytes on disk and its blobs. */
function signature(m: ResolvedModel): string {
  return JSON.stringify([m.manifestPath, m.modelPath, m.modelDigest, m.projectors, m.size]);
}

/**
 * The Ollama store as a read-only FUSE mount: every model in the layout a front end expects,
 * native files as links to their blobs, translated ones as their text GGUF and projector,
 * served from the blob without a copy (see @compat/mount). Models added to or removed from the
 * store appear and disappear while it is mounted.
 *
 * As root, where the kernel mounts file-backed EROFS images (probeErofs, when the first
 * translated file is placed), a translated file (llama-server maps a text GGUF; clip.cpp reads
 * a projector) whose 2 MiB chunks are mostly ranges of its blob is instead a link to the
 * file of an EROFS image (`<erofsDir>/<fileKey>.img`, metadata only) mounted under
 * `<erofsDir>/mnt/<pid>-<random>/<fileKey>`: llama-server opening the mount's path opens the
 * kernel's file, whose page cache takes 2 MiB folios (FUSE's takes 4 KiB pages), so its mmap is
 * PMD-mapped as a copy's is. Its chunks that are not ranges of the blob (the header's, a seam's,
 * a computed tensor's) are read from the daemon's own file of it, `.erofs/<fileKey>` in this
 * mount (not listed; padded to a whole block), a second device of the EROFS mount: nothing is
 * copied, and computed tensors are filled on first read as over FUSE. So an EROFS mount goes
 * before the daemon it reads (close), and one whose daemon died is mounted again with the new
 * one (restart). Otherwise, and for a file whose image could not be mounted, the FUSE daemon
 * serves it.
 */
export class StoreMount implements ModelPreparer {
  readonly store: ModelStore;
  readonly layout: ModelsLayout;
  /** Resolves when the mount is gone (closed, or its daemon died and was not mounted again). */
  readonly exited: Promise<MountExit>;
  private gone!: (exit: MountExit) => void;
  /** The daemon serving the mount now (another one after a restart); set by open once it has mounted. */
  private mount!: FuseMount;
  private readonly opts: StoreMountOptions;
  private readonly env: Record<string, string | undefined>;
  private readonly mounted = new Map<string, Shown>();
  /** Where facts are recorded (lazy planning), if they are. */
  private readonly records: FactsRecords | undefined;
  /** Models that could not be mounted: why (the error itself, for prepare to rethrow), and which version of them (not retried until it changes). */
  private readonly failed = new Map<string, { error: string; cause?: unknown; signature?: string }>();
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> = Promise.resolve();
  /** Views parsed for sidecar fills, kept for the next fill of the same model. */
  private readonly fillViews: KeptViews;
  /** Aborted by close(): a rescan stops between two models, and none starts after. */
  private readonly closing = new AbortController();
  /** The rescan running now, and the one asked for meanwhile (every caller shares it): never more. */
  private running: Promise<void> | undefined;
  private next: Promise<void> | undefined;
  private started = 0;
  /** Each manifest as last resolved, by path: a manifest whose file did not change is not read again. */
  private resolvedBy = new Map<string, { stamp: string; entry: Wanted }>();
  /** The blobs folder as last seen: a blob added, removed or renamed there resolves every manifest again. */
  private blobsStamp = "";
  private readonly watchers = new Map<string, FSWatcher>();
  /** Whether the store's folders are watched at all (a mount of all its models that rescans), and whether every one is (else the timer checks it every rescanMs). */
  private watching = false;
  private watchedAll = false;
  /** The folders of manifests/ the last scan found. */
  private lastFolders: string[] = [];
  private debounce: NodeJS.Timeout | undefined;
  /** The sweep of EROFS mounts a killed process left, started by open. */
  private erofsSwept: Promise<void> = Promise.resolve();
  /**
   * Whether translated files are EROFS mounts, and those mounted now: probed when the first
   * translated file is placed (a serve that plans models on first use starts no probe mount).
   */
  private erofsFound: Promise<ErofsFiles> | undefined;
  /** closeErofs's one run. */
  private erofsClosed: Promise<void> | undefined;

  private constructor(store: ModelStore, opts: StoreMountOptions) {
    this.store = store;
    this.layout = opts.layout ?? "models-dir";
    this.opts = opts;
    this.env = opts.env ?? process.env;
    this.exited = new Promise((r) => (this.gone = r));
    this.fillViews = new KeptViews(opts.viewsKept ?? 2);
    this.records = opts.factsDir !== undefined ? new FactsRecords(opts.factsDir) : undefined;
  }

  /** Mounts the store at `opts.dir` and shows its models (each that fails is reported, not fatal). */
  static async open(opts: StoreMountOptions): Promise<StoreMount> {
    const env = opts.env ?? process.env;
    const store = opts.store instanceof ModelStore ? opts.store : new ModelStore(opts.store, env);
    const sidecars = new SidecarStore(opts.sidecarDir ?? defaultSidecarDir(env));
    // before anything is mounted: a read-only cache would otherwise show as EIO (and an ENOENT
    // from mkdir in the log) on the first read of a translated file, long after "ready"
    await writableFolder(sidecars.dir);
    opts.signal?.throwIfAborted();
    const sm = new StoreMount(store, opts);
    const stop = () => sm.closing.abort(opts.signal?.reason);
    opts.signal?.addEventListener("abort", stop, { once: true });
    let mount: FuseMount;
    try {
      // the store's scan and the models' recorded facts while the daemon starts and mounts:
      // neither needs the other, and the daemon's start is a process of its own
      const first = sm.survey(sm.closing.signal, opts.listed);
      first.catch(() => undefined);
      // a mount that starts when a killed one's are still there takes them down meanwhile
      sm.erofsSwept = sweepStale(opts, sidecars.dir, env);
      try {
        mount = await FuseMount.mount(opts.dir, { sidecars, env, allowOther: opts.allowOther, onLog: (l) => opts.onStatus?.(`mount: ${l}`) });
      } catch (e) {
        sm.closing.abort();
        await first.catch(() => undefined);
        await sm.erofsSwept;
        throw e;
      }
      sm.mount = mount;
      try {
        await sm.firstScan(first);
        sm.closing.signal.throwIfAborted();
      } catch (e) {
        sm.closing.abort();
        await sm.closeErofs();
        await mount.close();
        throw e;
      }
    } finally {
      opts.signal?.removeEventListener("abort", stop);
    }
    const every = opts.rescanMs ?? 2000;
    if (every > 0 && opts.models === undefined) {
      // watched: the timer only makes up for lost events, one tick in 30
      let ticks = 0;
      sm.timer = setInterval(() => {
        if (!sm.watchedAll || ++ticks % 30 === 0) sm.changed(0);
      }, every);
      sm.timer.unref();
      sm.watching = true;
      sm.rewatch(sm.lastFolders);
    }
    sm.follow(mount);
    return sm;
  }

  /** When the daemon exits: the end of the mount, or (restart) the same store mounted again by a new one. */
  private follow(mount: FuseMount): void {
    void mount.exited.then(async (exit) => {
      if (this.mount !== mount) return;
      if (this.closing.signal.aborted || !this.opts.restart) return this.end(exit);
      const why = exit.signal ?? `exit ${exit.code}`;
      // the EROFS mounts read files of the daemon that is gone: taken down (detached while
      // mapped), and every file mounted again below with the new daemon's
      await this.takeDownErofs();
      try {
        this.mount = await FuseMount.mount(this.dir, { sidecars: mount.sidecars, env: this.env, allowOther: this.opts.allowOther, onLog: (l) => this.opts.onStatus?.(`mount: ${l}`) });
      } catch (e) {
        this.opts.onStatus?.(`mount: the mount daemon stopped (${why}) and could not be started again: ${(e as Error).message}`);
        return this.end(exit);
      }
      // every model is added again to the new daemon, at the same paths
      this.mounted.clear();
      this.failed.clear();
      this.follow(this.mount);
      await this.rescan().catch(() => undefined);
      this.opts.onStatus?.(`mount: the mount daemon stopped (${why}); mounted the store again at ${this.dir}, ${this.mounted.size} model${this.mounted.size === 1 ? "" : "s"}`);
    });
  }

  private end(exit: MountExit): void {
    clearInterval(this.timer);
    void this.fillViews.closeAll();
    this.stopWatching();
    void this.closeErofs().finally(() => this.gone(exit));
  }

  /** The mount point (where the daemon mounted the store). */
  get dir(): string {
    return this.mount.dir;
  }

  /** The models shown now, by name. */
  models(): MountedModel[] {
    return [...this.mounted.values()].map(({ name, files, prepared, asIs }) => ({ name, files, prepared, ...(asIs ? { asIs } : {}) }));
  }

  /** The model as mounted now, when it is this version of it (else undefined: not mounted yet, failed, or changed since). */
  shown(resolved: ResolvedModel): MountedModel | undefined {
    const known = this.mounted.get(resolved.name);
    if (known?.signature !== signature(resolved)) return undefined;
    const { name, files, prepared, asIs } = known;
    return { name, files, prepared, ...(asIs ? { asIs } : {}) };
  }

  /** Models of the store that could not be mounted, with why. */
  failures(): Array<{ name: string; error: string }> {
    return [...this.failed].map(([name, f]) => ({ name, error: f.error }));
  }

  /** Whether the daemon still serves the mount. */
  get alive(): boolean {
    return this.mount.alive;
  }

  /**
   * A model ready for llama-server, from the mount: the one mounted under its name when it is
   * the same model, else mounted now (a model not in the store, a GGUF path).
   */
  async prepare(resolved: ResolvedModel): Promise<PreparedModel> {
    const known = this.mounted.get(resolved.name);
    if (known?.signature === signature(resolved)) return known.prepared;
    await this.queue(() => this.add(resolved));
    const now = this.mounted.get(resolved.name);
    if (!now) {
      // the model's own error (KV_TYPE, a bad manifest, ...), as serving it from the cache would have thrown
      const failure = this.failed.get(resolved.name);
      if (failure?.cause instanceof Error) throw failure.cause;
      throw new PrepareError("UNSUPPORTED_MODEL", `${resolved.name}: ${failure?.error ?? "not mounted"}`, { ref: resolved.ref });
    }
    return now.prepared;
  }

  /**
   * Resolves once the model's files are in the mount (planned now if it was shown from its
   * recorded facts only); rejects with the model's error if it cannot be planned. Call it
   * before llama-server opens them.
   */
  async ready(resolved: ResolvedModel): Promise<void> {
    for (;;) {
      const known = this.mounted.get(resolved.name);
      if (known?.plan === undefined) {
        const failure = known === undefined ? this.failed.get(resolved.name) : undefined;
        if (failure?.cause instanceof Error) throw failure.cause;
        return;
      }
      await known.plan();
    }
  }

  /** Whether `path` is a file of a model shown from its recorded facts and not planned yet. */
  notYetPlanned(path: string): boolean {
    for (const m of this.mounted.values()) if (m.plan !== undefined && (m.prepared.modelPath === path || m.prepared.mmproj === path)) return true;
    return false;
  }

  /** How many rescans have started (at most one runs, and at most one waits, however many are asked for). */
  get rescans(): number {
    return this.started;
  }

  /**
   * Brings the mount in line with the store: new models added, removed ones taken away, changed
   * ones replaced. Resolves once a rescan that started after this call has ended: callers
   * while one waits share it, so changes seen faster than a rescan runs never queue up.
   */
  rescan(): Promise<void> {
    if (this.closing.signal.aborted) return Promise.resolve();
    if (this.next) return this.next;
    const after = this.running?.catch(() => undefined);
    const next = (async () => {
      await after;
      this.next = undefined;
      if (this.closing.signal.aborted) return;
      this.started++;
      const run = this.queue(() => this.syncNow(this.closing.signal));
      this.running = run;
      try {
        await run;
      } finally {
        if (this.running === run) this.running = undefined;
      }
    })();
    this.next = next;
    return next;
  }

  /** The first rescan, from a survey that ran while the daemon was starting. */
  private async firstScan(first: Promise<Survey>): Promise<void> {
    this.started++;
    const run = this.queue(() => this.syncNow(this.closing.signal, first));
    this.running = run;
    try {
      await run;
    } finally {
      if (this.running === run) this.running = undefined;
    }
  }

  /** A change seen in the store (or the timer's tick): a rescan soon, coalesced with those already asked for. */
  private changed(delayMs = 50): void {
    if (this.closing.signal.aborted || this.debounce) return;
    this.debounce = setTimeout(() => {
      this.debounce = undefined;
      void this.rescan().catch((e: Error) => {
        if (!this.closing.signal.aborted) this.opts.onStatus?.(`rescan failed: ${e.message}`);
      });
    }, delayMs);
    this.debounce.unref();
  }

  /**
   * What a rescan works from: the store's models now and, for each one that will be added (new,
   * or changed since it was shown), its recorded facts, all read at once rather than model after model.
   */
  private async survey(signal: AbortSignal, listed?: Promise<StoreListing>): Promise<Survey> {
    const wanted = await this.wanted(signal, listed);
    const listing = listed !== undefined ? await listed : undefined;
    const facts = new Map<string, RecordedFacts | undefined>();
    const records = this.records;
    if (records !== undefined) {
      const profile = this.opts.profile ?? "native";
      await Promise.all(
        [...wanted].map(async ([name, entry]) => {
          if ("error" in entry || this.mounted.get(name)?.signature === signature(entry.model)) return;
          // a record found when the store was listed (a record written since is read now)
          facts.set(name, listing?.facts?.get(entry.model) ?? (await records.read(entry.model, profile)));
        }),
      );
    }
    return { wanted, facts };
  }

  private async syncNow(signal: AbortSignal, surveyed?: Promise<Survey>): Promise<void> {
    const { wanted, facts } = await (surveyed ?? this.survey(signal));
    for (const [name, m] of this.mounted) {
      if (wanted.has(name)) continue;
      signal.throwIfAborted();
      await this.drop(name, m);
      this.opts.onStatus?.(`${name}: removed from the store, gone from the mount`);
    }
    for (const name of [...this.failed.keys()]) if (!wanted.has(name)) this.failed.delete(name);
    for (const [name, entry] of wanted) {
      if ("error" in entry) {
        // a manifest that no longer resolves (a blob removed, a broken manifest): not shown
        const known = this.mounted.get(name);
        if (known) await this.drop(name, known);
        if (known || !this.failed.has(name)) this.opts.onStatus?.(`${name}: not mounted: ${entry.error}`);
        this.failed.set(name, { error: entry.error, cause: entry.cause });
        continue;
      }
      const sig = signature(entry.model);
      if (this.mounted.get(name)?.signature === sig || this.failed.get(name)?.signature === sig) continue;
      signal.throwIfAborted();
      await this.add(entry.model, facts.has(name) ? { facts: facts.get(name) } : undefined);
    }
    if (this.watching) this.rewatch(this.lastFolders);
  }

  /** Unmounts (llama-servers reading from it should be stopped first). A rescan running stops between two models; none waits. */
  async close(): Promise<MountExit> {
    this.closing.abort();
    clearInterval(this.timer);
    clearTimeout(this.debounce);
    this.stopWatching();
    await this.syncing.catch(() => undefined);
    // the EROFS mounts first: they hold files of the daemon's mount open
    await this.closeErofs();
    const exit = await this.mount.close();
    await this.fillViews.closeAll();
    this.gone(exit);
    return exit;
  }

  /** Runs jobs that change the mount one after another (a rescan, a model prepare() mounts). */
  private queue(job: () => Promise<void>): Promise<void> {
    const run = this.syncing.then(job);
    this.syncing = run.catch(() => undefined);
    return run;
  }

  /**
   * Watches the store's root, blobs/ and every folder of manifests/ (fs.watch is not recursive
   * on Linux): a manifest written, a tag added or removed, a blob come or gone asks for a
   * rescan. A folder that cannot be watched (the inotify limit) leaves the timer to notice.
   */
  private rewatch(folders: readonly string[]): void {
    const root = this.store.root;
    const blobs = join(root, "blobs");
    const want = new Set([root, blobs, ...folders]);
    for (const [dir, w] of this.watchers) {
      if (want.has(dir)) continue;
      w.close();
      this.watchers.delete(dir);
    }
    let all = true;
    for (const dir of want) {
      if (this.watchers.has(dir)) continue;
      // in the root, only its two folders matter; in blobs/, a blob's bytes being written (a pull) are no change to the list
      const relevant =
        dir === root ? (_: string, f: string | null) => f === "manifests" || f === "blobs" : dir === blobs ? (event: string) => event === "rename" : () => true;
      try {
        const w = watch(dir, { persistent: false }, (event, file) => {
          if (relevant(event, file)) this.changed();
        });
        w.on("error", () => {
          w.close();
          this.watchers.delete(dir);
          this.changed();
        });
        this.watchers.set(dir, w);
      } catch {
        all = false; // gone already (the next scan says), or no watch left: the timer looks instead
      }
    }
    this.watchedAll = all;
  }

  private stopWatching(): void {
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
    this.watching = false;
  }

  private async wanted(signal: AbortSignal, listed?: Promise<StoreListing>): Promise<Map<string, Wanted>> {
    const out = new Map<string, Wanted>();
    if (this.opts.models === undefined || this.opts.models === "all") {
      const listing = await (listed ?? listStore(this.store, signal, { blobsStamp: this.blobsStamp, resolvedBy: this.resolvedBy }));
      this.lastFolders = listing.folders;
      this.blobsStamp = listing.blobsStamp;
      this.resolvedBy = listing.resolvedBy;
      for (const { name, path } of listing.names) out.set(name, listing.resolvedBy.get(path)!.entry);
      return out;
    }
    for (const ref of this.opts.models) {
      try {
        const m = await this.store.resolve(ref);
        out.set(m.name, { model: m });
      } catch (e) {
        out.set(ref, { error: (e as Error).message, cause: e });
      }
    }
    return out;
  }

  private async drop(name: string, m: { paths: string[]; erofs?: string[] }): Promise<void> {
    this.mounted.delete(name);
    for (const p of m.paths) await this.mount.remove(p).catch(() => undefined);
    await this.releaseErofs(m.erofs ?? []);
  }

  /**
   * The file of an EROFS image of `plan` to link the mount's path to, mounted now unless another
   * model's file of the same content key has it mounted; or, when it is not to be one, why
   * (`route`). The image's chunks that are not ranges of the blob point into the daemon's own
   * file of the plan, added here at `.erofs/<key>`. EROFS_UNAVAILABLE and EROFS_UNSUPPORTED (the
   * kernel refused the mount, device paths the mount options cannot carry) leave the file to
   * FUSE; other errors are the file's.
   */
  private async viaErofs(key: string, kind: "text" | "mmproj", plan: FilePlan, parts: readonly ComputedPart[]): Promise<{ target?: string; route?: string }> {
    // a projector too: clip.cpp reads it (no mmap), and a cold read of one through EROFS took
    // 0.54x the time through FUSE (418 vs 777 ms for 340 MiB, medians of 6 alternated runs, load 8-9)
    const e = await this.erofsFiles();
    if (!e.usable) return {}; // every file is FUSE's, as the line said
    const name = `${kind}.gguf`;
    let held = e.held.get(key);
    if (held === undefined) {
      const { ranges, whole } = erofsChunks([{ name, plan }]);
      // a file mostly read through the daemon's file is served as well by that file itself
      if (whole > ranges) return { route: `FUSE: ${whole} of its ${ranges + whole} 2 MiB chunks are not ranges of a file` };
      const fuse = this.mount;
      const device = `${EROFS_DEVICES}/${key}`;
      const mounting = (async () => {
        await fuse.addFile(device, wholeFilePlan(plan), parts);
        try {
          const image = join(e.dir, `${key}.img`);
          const img = await writeErofsImage(image, [{ name, plan, whole: join(fuse.dir, device) }], { reuse: true });
          const at = join(e.mounts, key);
          await mkdir(at, { recursive: true });
          return await mountErofs(image, at, img.devices, { env: this.env });
        } catch (err) {
          await fuse.remove(device).catch(() => undefined);
          throw err;
        }
      })();
      held = { mount: mounting, users: 0, device, fuse };
      e.held.set(key, held);
    }
    held.users++;
    try {
      return { target: join((await held.mount).dir, name), route: "EROFS" };
    } catch (err) {
      if (e.held.get(key) === held) e.held.delete(key);
      if (err instanceof MountError && (err.code === "EROFS_UNAVAILABLE" || err.code === "EROFS_UNSUPPORTED")) return { route: `FUSE: ${err.message}` };
      throw err;
    }
  }

  /** Whether translated files can be EROFS mounts: found once (after the sweep), and said in one line. */
  private erofsFiles(): Promise<ErofsFiles> {
    return (this.erofsFound ??= this.erofsSwept.then(async () => {
      const e = await erofsFiles(this.opts, this.mount.sidecars.dir, this.env);
      this.opts.onStatus?.(e.usable ? `mount: translated files from kernel EROFS mounts (${e.dir}), where they are mostly ranges of their blobs` : `mount: translated files from the FUSE daemon: ${e.reason}`);
      return e;
    }));
  }

  /**
   * Unmounts every EROFS mount (detaching those in use) and removes this process's folder of
   * them, once: close() and the daemon's exit (end, which close's own unmount of the daemon
   * causes) both ask, and each must find the mounts gone when it resolves, not the one that
   * came second return while the first still unmounts.
   */
  private closeErofs(): Promise<void> {
    return (this.erofsClosed ??= (async () => {
      await this.erofsSwept;
      await this.takeDownErofs();
      const e = await this.erofsFound;
      if (e?.usable === true) await rm(e.mounts, { recursive: true, force: true }).catch(() => undefined);
    })());
  }

  /** Unmounts every EROFS mount (detaching those in use), leaving their daemon's files to it: its close, or its death, takes them. */
  private async takeDownErofs(): Promise<void> {
    const e = await this.erofsFound;
    if (e?.usable !== true) return;
    const all = [...e.held.values()];
    e.held.clear();
    for (const h of all) await unmountErofs(h.mount, (l) => this.opts.onStatus?.(l));
  }

  /** Lets go of EROFS mounts by content key: the last user of one unmounts it (detaches it while a process still maps its file). */
  private async releaseErofs(keys: readonly string[]): Promise<void> {
    if (keys.length === 0 || this.erofsFound === undefined) return;
    const e = await this.erofsFound;
    if (!e.usable) return;
    for (const key of keys) {
      const held = e.held.get(key);
      if (held === undefined || --held.users > 0) continue;
      e.held.delete(key);
      // the daemon's file goes once nothing reads it: a detached mount (a llama-server still maps
      // its file) may still read it, and it stays until the daemon goes
      if ((await unmountErofs(held.mount, (l) => this.opts.onStatus?.(l))) === "unmounted" && held.fuse === this.mount) await held.fuse.remove(held.device).catch(() => undefined);
    }
  }

  /** Mounts one model's files (replacing an earlier version of it), or shows it from its recorded facts (read now unless `recorded` has them). Failures are recorded, not thrown. */
  private async add(resolved: ResolvedModel, recorded?: { facts: RecordedFacts | undefined }): Promise<void> {
    const name = resolved.name;
    const old = this.mounted.get(name);
    if (old) await this.drop(name, old);
    this.failed.delete(name);
    const profile = this.opts.profile ?? "native";
    const facts = recorded !== undefined ? recorded.facts : await this.records?.read(resolved, profile);
    if (facts !== undefined) {
      this.mounted.set(name, this.shownFromFacts(resolved, facts));
      return;
    }
    try {
      const versions = this.records ? await FactsRecords.versions(resolved).catch(() => undefined) : undefined;
      const m = await this.mountModel(resolved);
      this.mounted.set(name, m);
      if (versions) await this.records!.write(resolved, profile, versions, factsOf(m.prepared, m.mmprojKind));
      this.opts.onStatus?.(mountedLine(name, m));
    } catch (e) {
      const why = e instanceof Error ? e.message.split("\n")[0]! : String(e);
      this.failed.set(name, { error: why, cause: e, signature: signature(resolved) });
      this.opts.onStatus?.(`${name}: not mounted: ${why}`);
    }
  }

  /**
   * A model as its recorded facts show it, before any parse: the files it will be at, and a
   * plan() that parses and mounts it (once, in the queue of mount changes). A plan that fails
   * takes the model away and records why, as a failed add does.
   */
  private shownFromFacts(resolved: ResolvedModel, facts: RecordedFacts): Shown {
    const name = resolved.name;
    const { files, prepared } = shownAt(this.dir, this.layout, resolved, facts);
    const layer = resolved.projectors[0];
    const asIs = servedAsIs(facts) ? { model: resolved.modelPath, ...(facts.mmproj === "file" && layer !== undefined ? { mmproj: layer } : {}) } : undefined;
    let planning: Promise<void> | undefined;
    const entry: Shown = {
      name,
      files,
      prepared,
      ...(asIs ? { asIs } : {}),
      signature: signature(resolved),
      paths: [],
      mmprojKind: facts.mmproj,
      plan: () =>
        (planning ??= this.queue(async () => {
          // taken away or replaced meanwhile: ready() looks again
          if (this.mounted.get(name) !== entry) return;
          try {
            const m = await this.mountModel(resolved);
            this.mounted.set(name, m);
            this.opts.onStatus?.(mountedLine(name, m));
          } catch (e) {
            this.mounted.delete(name);
            const why = e instanceof Error ? e.message.split("\n")[0]! : String(e);
            this.failed.set(name, { error: why, cause: e, signature: entry.signature });
            this.opts.onStatus?.(`${name}: not mounted: ${why}`);
          }
        })),
    };
    return entry;
  }

  private async mountModel(resolved: ResolvedModel): Promise<Shown> {
    const profile = this.opts.profile ?? "native";
    const views = await servedViews(resolved, this.env, profile);
    try {
      const { text, mmproj: projector } = views;
      const files = modelFiles(servedName(resolved), this.layout, projector !== null);
      const paths: string[] = [];
      const erofs: string[] = [];
      const routes: string[] = [];
      const sig = signature(resolved);
      // a file we translate is planned (served by the FUSE daemon, or a link to its EROFS
      // mount's file); a file llama.cpp takes as it is is a link to the blob
      const place = async (at: string, path: string, view: TranslatedView | null, kind: "text" | "mmproj") => {
        paths.push(at);
        if (view === null) return this.mount.addLink(at, path, BigInt(Math.round((await stat(path)).mtimeMs * 1e6)));
        const key = await this.fileKey(path, kind, profile, kind === "text" ? resolved.modelDigest : undefined);
        const { plan, computed } = await planView(view, { sidecarPath: (t, i) => this.mount.sidecars.pathFor(key, t, i) });
        const identity = plan.sources.find((src) => src.path === path);
        const parts = this.reopening(computed, path, kind, profile, resolved, identity);
        const { target, route } = await this.viaErofs(key, kind, plan, parts);
        if (route !== undefined) routes.push(`${kind} ${route}`);
        if (target === undefined) return this.mount.addFile(at, plan, parts);
        erofs.push(key);
        await this.mount.addLink(at, target, plan.mtimeNs);
      };
      let mmproj: string | undefined;
      try {
        await place(files.model, resolved.modelPath, text, "text");
        if (projector?.kind === "file") await place(files.mmproj, projector.path, null, "mmproj");
        else if (projector?.kind === "view") await place(files.mmproj, projector.path ?? resolved.modelPath, projector.view, "mmproj");
      } catch (e) {
        await this.releaseErofs(erofs);
        throw e;
      }
      if (projector) mmproj = files.mmproj;
      const prepared = preparedModel(resolved, views, {
        modelPath: join(this.dir, files.model),
        translated: text !== null,
        cacheHit: false,
        mmproj: mmproj ? join(this.dir, mmproj) : undefined,
      });
      // every file a link: the store's own files are what llama.cpp reads
      const asIs = text === null && projector?.kind !== "view" ? { model: resolved.modelPath, ...(projector ? { mmproj: projector.path } : {}) } : undefined;
      return { name: resolved.name, files: { model: files.model, ...(mmproj ? { mmproj } : {}) }, prepared, ...(asIs ? { asIs } : {}), signature: sig, paths, erofs, routes, mmprojKind: projector?.kind ?? "none" };
    } finally {
      await views.close();
    }
  }

  /** The content key of a translated file: what it is made from, as the cache keys its entries. */
  private async fileKey(path: string, kind: "text" | "mmproj", profile: TranslationProfile, digest: string | undefined): Promise<string> {
    let from = digest ?? blobDigest(path);
    if (from === undefined) {
      // a plain file: its identity now (a changed file is another key)
      const st = await stat(path, { bigint: true });
      from = `file:${path}:${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}`;
    }
    return contentKey({ source: from, translator: TRANSLATOR_VERSION, profile, kind });
  }

  /**
   * The sidecars' producers. The views planned from are closed once planned (a mounted store
   * holds no model's metadata in memory until it is read); the first fill of a model opens and
   * parses its file again, and the views are kept for its next fills (KeptViews), so a model's
   * N computed tensors cost one parse, not N.
   */
  private reopening(
    computed: ComputedPart[],
    path: string,
    kind: "text" | "mmproj",
    profile: TranslationProfile,
    resolved: ResolvedModel,
    planned: { ino: bigint; size: number; mtimeNs: bigint } | undefined,
  ): ComputedPart[] {
    const env = this.env;
    const kept = this.fillViews;
    if (computed.length > 0) loadOpsSoon();
    const key = JSON.stringify([signature(resolved), profile, planned?.ino.toString(), planned?.mtimeNs.toString()]);
    // bytes computed from another file than the one planned would be kept under its key
    const same = async () => {
      if (planned === undefined) return;
      const st = await stat(path, { bigint: true });
      if (st.ino !== planned.ino || Number(st.size) !== planned.size || st.mtimeNs !== planned.mtimeNs) throw new Error(`${path} changed since it was mounted`);
    };
    return computed.map((part) => ({
      ...part,
      async produce() {
        await same();
        return kept.use(key, () => servedViews(resolved, env, profile), async (views) => {
          const view = kind === "text" ? views.text : views.mmproj?.kind === "view" ? views.mmproj.view : null;
          if (view === null) throw new Error(`${path}: no longer translates`);
          const t = view.model.tensors[part.tensor.index];
          if (t?.name !== part.tensor.name) throw new Error(`${path}: ${part.label} is not in its translation any more`);
          const bytes = await readTensorData(t);
          await same();
          return bytes;
        });
      },
    }));
  }
}

let opsLoading = false;

/**
 * Loads the ops' native code (@compat/tensor-ops' addon, unless COMPAT_TENSOR_OPS rules it out)
 * once a model with computed tensors is mounted, on the next turn of the event loop. Its first
 * fill would load it otherwise, inside the wait of the read that asked for it: a dlopen, read
 * from the disk when the load comes after the page cache was dropped. Loaded here, its pages are
 * mapped, and a cache drop leaves mapped pages where they are.
 */
function loadOpsSoon(): void {
  if (opsLoading) return;
  opsLoading = true;
  setImmediate(() => activeBackend()).unref();
}

/** How long views stay open after their last fill. */
const VIEWS_IDLE_MS = 5000;

/**
 * Open views of recently filled models, at most `limit` (least recently used closed first), each
 * closed when unused for VIEWS_IDLE_MS: the mount parses a model once while its computed tensors
 * are filled, and holds nothing once it is loaded.
 */
class KeptViews {
  private readonly open = new Map<string, { views: Promise<ServedViews>; users: number; idle?: NodeJS.Timeout }>();

  constructor(private readonly limit: number) {}

  /** Runs `fn` on the views under `key`, opened with `openViews` when they are not open. */
  async use<T>(key: string, openViews: () => Promise<ServedViews>, fn: (views: ServedViews) => Promise<T>): Promise<T> {
    let entry = this.open.get(key);
    if (entry === undefined) {
      entry = { views: openViews(), users: 0 };
      entry.views.catch(() => undefined); // a failure is the caller's, below; the entry goes
    } else {
      this.open.delete(key); // re-inserted last: the most recently used
    }
    this.open.set(key, entry);
    clearTimeout(entry.idle);
    entry.users++;
    try {
      return await fn(await entry.views);
    } catch (e) {
      // views that failed to open, or that failed a fill, are not kept for the next
      if (this.open.get(key) === entry) this.open.delete(key);
      throw e;
    } finally {
      entry.users--;
      if (this.open.get(key) !== entry) {
        if (entry.users === 0) await close(entry.views);
      } else if (entry.users === 0) {
        entry.idle = setTimeout(() => {
          if (this.open.get(key) !== entry || entry.users > 0) return;
          this.open.delete(key);
          void close(entry.views);
        }, VIEWS_IDLE_MS);
        entry.idle.unref();
      }
      await this.trim();
    }
  }

  /** Closes every kept view (the mount is going). */
  async closeAll(): Promise<void> {
    const all = [...this.open.values()];
    this.open.clear();
    for (const e of all) {
      clearTimeout(e.idle);
      if (e.users === 0) await close(e.views);
    }
  }

  /** Closes the least recently used views beyond the limit that nothing is using. */
  private async trim(): Promise<void> {
    for (const [key, e] of this.open) {
      if (this.open.size <= this.limit) return;
      if (e.users > 0) continue;
      this.open.delete(key);
      clearTimeout(e.idle);
      await close(e.views);
    }
  }
}

async function close(views: Promise<ServedViews>): Promise<void> {
  await views.then((v) => v.close()).catch(() => undefined);
}

/** Creates `dir` if missing and checks this user may write in it, else CACHE_UNWRITABLE naming the folder and why (EROFS, EACCES, a file in the way). */
async function writableFolder(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true });
    await access(dir, constants.W_OK);
  } catch (e) {
    if (!isSystemError(e)) throw e;
    throw new PrepareError("CACHE_UNWRITABLE", `cannot write the mount's sidecar folder ${dir}: ${await whyNotWritable(dir, e)}; choose another cache folder`, { dir, code: e.code });
  }
}

/** What the mount makes of one manifest of the store: the model, or why it cannot be shown. */
type Wanted = { model: ResolvedModel } | { error: string; cause: unknown };

/** A scan of the store, with the recorded facts of the models it will add (StoreMount.survey). */
type Survey = { wanted: Map<string, Wanted>; facts: Map<string, RecordedFacts | undefined> };

/**
 * The store's models as one look at it found them: each manifest's path, version (stamp) and what
 * it resolved to, the blobs folder's version, and the folders of manifests/ (what a watcher watches).
 */
export interface StoreListing {
  /** Every model's name and manifest path, sorted by name (ModelStore.list's order). */
  names: Array<{ name: string; path: string }>;
  resolvedBy: Map<string, { stamp: string; entry: Wanted }>;
  blobsStamp: string;
  folders: string[];
  /** The recorded facts found for its models when it was listed (ServeMount reads them once for itself and the mount). */
  facts?: WeakMap<ResolvedModel, RecordedFacts>;
}

/**
 * Lists the store as the mount's scans do. With `known` (the listing before), a manifest whose
 * file is as it was resolves as it did, unless a blob came or went; each manifest's stamp is
 * taken before it is read, so a change while listing is seen by the next listing.
 */
export async function listStore(store: ModelStore, signal?: AbortSignal, known?: Pick<StoreListing, "blobsStamp" | "resolvedBy">): Promise<StoreListing> {
  const { names, folders } = await store.scan();
  const blobsStamp = stamp(join(store.root, "blobs"));
  const before = known !== undefined && known.blobsStamp === blobsStamp ? known.resolvedBy : undefined;
  const paths = names.map((n) => store.manifestPath(n));
  const stamps = paths.map(stamp);
  const resolvedBy = new Map<string, { stamp: string; entry: Wanted }>();
  const again: number[] = [];
  for (let i = 0; i < names.length; i++) {
    const was = before?.get(paths[i]!);
    if (was !== undefined && was.stamp === stamps[i] && stamps[i] !== "") resolvedBy.set(paths[i]!, was);
    else again.push(i);
  }
  const resolved = await store.resolveAll(
    again.map((i) => names[i]!),
    signal,
  );
  again.forEach((i, k) => {
    const e = resolved[k]!;
    resolvedBy.set(paths[i]!, { stamp: stamps[i]!, entry: e.model ? { model: e.model } : { error: e.error!.message, cause: e.error } });
  });
  const listed = names.map((n, i) => ({ name: displayName(n), path: paths[i]! })).sort(byName);
  return { names: listed, resolvedBy, blobsStamp, folders };
}

/** What ModelStore.list answers, from a listing: each model, or its error. */
export function listedModels(listing: StoreListing): Array<{ name: string; model?: ResolvedModel; error?: StoreError }> {
  return listing.names.map(({ name, path }) => {
    const entry = listing.resolvedBy.get(path)!.entry;
    // a listing's errors are resolveAll's: StoreErrors
    return "model" in entry ? { name, model: entry.model } : { name, error: entry.cause as StoreError };
  });
}

/**
 * A file's identity and version (inode, size, change and modification times); "" when it is not
 * there. Synchronous: a stat per manifest, where a trip through libuv's threads each cost a
 * rescan (and serve --all's start) more than the stat.
 */
function stamp(path: string): string {
  const v = versionNow(path);
  return v ? `${v.dev}:${v.ino}:${v.size}:${v.mtimeNs}:${v.ctimeNs}` : "";
}

/**
 * A model as the mount shows it, with what changes it: its version, the paths it added, the
 * EROFS mounts its files link to (content keys) and how each translated file is served, and,
 * while it is shown from its recorded facts only, the plan that mounts its files.
 */
type Shown = MountedModel & { signature: string; paths: string[]; erofs?: string[]; routes?: string[]; mmprojKind: RecordedFacts["mmproj"]; plan?: () => Promise<void> };

/** The status line of a model mounted: its files, and how its translated ones are served. */
function mountedLine(name: string, m: Shown): string {
  const how = m.prepared.translated || m.routes?.length ? `translated${m.routes?.length ? `; ${m.routes.join("; ")}` : ""}` : "native";
  return `${name} -> ${m.files.model}${m.files.mmproj ? ` + ${m.files.mmproj}` : ""} (${how})`;
}

/**
 * Whether a StoreMount serves translated files from EROFS mounts, and if so where: images in
 * `dir`, this process's mounts in `mounts`, held by content key with their users (the files
 * of models that link to them); else why not.
 */
type ErofsFiles =
  | { usable: true; dir: string; mounts: string; held: Map<string, HeldErofs> }
  | { usable: false; reason: string };

/** One EROFS mount of a content key: its users, and the daemon's file its chunks read (`device`, in the mount of `fuse`). */
type HeldErofs = { mount: Promise<ErofsMount>; users: number; device: string; fuse: FuseMount };

/**
 * The folder of the FUSE mount that holds the daemon's files the EROFS mounts read: a dot-name,
 * which the daemon does not list (llama-server's --models-dir would take a folder for a model).
 */
const EROFS_DEVICES = ".erofs";

/** The EROFS probe's verdict, by folder: once per process, as its answer does not change. */
const probed = new Map<string, ReturnType<typeof probeErofs>>();

/** The EROFS folder of a StoreMount: opts.erofsDir, else `erofs/` beside its sidecars (on their file system: they are devices of its images). */
function erofsDirOf(opts: StoreMountOptions, sidecarDir: string): string {
  return opts.erofsDir ?? join(dirname(sidecarDir), "erofs");
}

/**
 * Whether translated files can be EROFS mounts here (opts.erofs, OLLAMA_COMPAT_EROFS=0, root,
 * a probe mount on the sidecars' file system), and this process's folder for them if so.
 */
async function erofsFiles(opts: StoreMountOptions, sidecarDir: string, env: Record<string, string | undefined>): Promise<ErofsFiles> {
  if (opts.erofs === false) return { usable: false, reason: "EROFS turned off (erofs: false)" };
  if (env.OLLAMA_COMPAT_EROFS === "0") return { usable: false, reason: "EROFS turned off (OLLAMA_COMPAT_EROFS=0)" };
  const support = erofsSupport(env);
  if (!support.usable) return support; // not root: no folder made for nothing
  const dir = erofsDirOf(opts, sidecarDir);
  try {
    await mkdir(dir, { recursive: true });
    let probe = probed.get(dir);
    if (probe === undefined) probed.set(dir, (probe = probeErofs(dir, env)));
    const verdict = await probe;
    if (!verdict.usable) return verdict;
    const mounts = await erofsMountFolder(join(dir, "mnt"));
    // allow_other: the links lead other users into the EROFS folder, which they must be able to reach
    const closed = opts.allowOther ? await unsearchable(mounts) : undefined;
    if (closed !== undefined) {
      await rm(mounts, { recursive: true, force: true });
      return { usable: false, reason: `other users cannot reach ${closed} (allow-other), where the EROFS mounts would be` };
    }
    return { usable: true, dir, mounts, held: new Map() };
  } catch (e) {
    return { usable: false, reason: `EROFS mounts cannot be used here: ${(e as Error).message}` };
  }
}

/** The first folder from `dir` up that other users cannot search (no o+x), if any. */
async function unsearchable(dir: string): Promise<string | undefined> {
  for (let d = dir; ; d = dirname(d)) {
    if (((await stat(d)).mode & 0o001) === 0) return d;
    if (dirname(d) === d) return undefined;
  }
}

/**
 * Takes down the EROFS mounts a killed process left under the EROFS folder (they hold their
 * blobs open), whether or not this mount will make any. Only root can have made them.
 */
async function sweepStale(opts: StoreMountOptions, sidecarDir: string, env: Record<string, string | undefined>): Promise<void> {
  if (!erofsSupport(env).usable) return;
  try {
    const swept = await sweepErofsMounts(join(erofsDirOf(opts, sidecarDir), "mnt"), env);
    if (swept.length > 0) opts.onStatus?.(`mount: took down ${swept.length} EROFS mount${swept.length === 1 ? "" : "s"} a stopped mount left (${swept.join(", ")})`);
  } catch (e) {
    opts.onStatus?.(`mount: cannot take down the EROFS mounts a stopped mount left: ${(e as Error).message}`);
  }
}

/** Unmounts one EROFS mount (detaches it while it is in use) and removes its folder; undefined when it was not mounted or could not be unmounted. */
async function unmountErofs(mount: Promise<ErofsMount>, onStatus?: (line: string) => void): Promise<"unmounted" | "detached" | undefined> {
  const m = await mount.catch(() => undefined);
  if (m === undefined) return undefined;
  try {
    const how = await m.close();
    await rm(m.dir, { recursive: true, force: true });
    return how;
  } catch (e) {
    onStatus?.(`mount: ${(e as Error).message}`);
    return undefined;
  }
}



/**
 * Where a mount at `dir` shows a model from its recorded facts, and what llama-server is given
 * for it: known before the mount is (ServeMount hands it out while the daemon starts).
 */
export function shownAt(dir: string, layout: ModelsLayout, resolved: ResolvedModel, facts: RecordedFacts): { files: { model: string; mmproj?: string }; prepared: PreparedModel } {
  const files = modelFiles(servedName(resolved), layout, facts.mmproj !== "none");
  const prepared = preparedFromFacts(resolved, facts, { modelPath: join(dir, files.model), mmproj: facts.mmproj !== "none" ? join(dir, files.mmproj) : undefined });
  return { files: { model: files.model, ...(facts.mmproj !== "none" ? { mmproj: files.mmproj } : {}) }, prepared };
}

/** The served name of a model: its Ollama name, or a plain file's name without `.gguf`. */
function servedName(m: ResolvedModel): string {
  return m.kind === "file" ? m.name.replace(/\.gguf$/i, "") : m.name;
}
