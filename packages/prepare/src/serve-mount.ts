import { realpathSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { ownedTempDir } from "@compat/files";
import { fuseSupport, MountError } from "@compat/mount";
import { ModelStore, type ResolvedModel, type StoreError } from "@compat/store";
import { preparedModel, servedViews, type ModelPreparer, type PreparedModel } from "./preparer";
import { compatEnabled } from "@compat/handlers";
import { FactsRecords, factsOf, preparedFromFacts, servedAsIs, type RecordedFacts } from "./model-facts";
import { defaultFactsDir, listedModels, listStore, shownAt, StoreMount, type StoreListing, type StoreMountOptions } from "./store-mount";

export interface ServeMountOptions extends Omit<StoreMountOptions, "dir" | "factsDir"> {
  /** Where each model's facts are recorded, so a restart plans nothing up front (default defaultFactsDir(env)); null: record nothing, plan every model at start. */
  factsDir?: string | null;
  /** Where a model that needs translating goes when the store cannot be mounted here: the translation cache. */
  fallback: ModelPreparer;
  /** Called once, at the first model that needs translating, when FUSE cannot be used: the one-line reason. */
  onNoMount?(reason: string): void;
}

/**
 * How the models of one `serve` reach llama-server. A native model (a migrated store holds
 * nothing else) is served as it is: the blob path, its projector layer as --mmproj, no mount,
 * no cache entry. The first model that needs translating mounts the store privately (in a
 * temp folder, removed on close), so a store without one starts no mount daemon at all;
 * where FUSE cannot be used (not Linux, no /dev/fuse, no daemon, the kernel refused the
 * mount) those models go to `fallback`, and onNoMount says why.
 */
export class ServeMount implements ModelPreparer {
  private opening: Promise<{ mount: StoreMount; dir: string } | undefined> | undefined;
  /** The mount point, known once its folder is made (before the daemon has mounted); undefined: no mount. */
  private point: Promise<string | undefined> | undefined;
  /** Files handed out from recorded facts before the mount was up: they are there only once it is (settled). */
  private readonly early = new Set<string>();
  /** Why the store could not be mounted, once that is known. */
  private whyNot: string | undefined;
  /** The mount's opening has ended (mounted, not mounted, or failed). */
  private openEnded = false;
  private closed = false;
  /** Aborted by close(): a mount still opening stops where it is instead of finishing its start first. */
  private readonly closing = new AbortController();
  private readonly records: FactsRecords | undefined;
  /** The mount once open (for the synchronous notYetPlanned). */
  private current: StoreMount | undefined;
  private readonly store: ModelStore;
  /** The store as list() found it: the mount's first scan when it opens, so the store is read once at start. */
  private listing: Promise<StoreListing> | undefined;
  /** The records found by list(), by the models it answered. */
  private listedFacts: WeakMap<ResolvedModel, RecordedFacts> | undefined;

  constructor(private readonly opts: ServeMountOptions) {
    const env = opts.env ?? process.env;
    const dir = opts.factsDir === undefined ? defaultFactsDir(env) : opts.factsDir;
    // OLLAMA_LLAMA_CPP_COMPAT=0 serves every file as it is: no record of a translation applies
    this.records = dir === null || !compatEnabled(env) ? undefined : new FactsRecords(dir);
    this.store = opts.store instanceof ModelStore ? opts.store : new ModelStore(opts.store, env);
  }

  /** Every installed model, as ModelStore.list answers; a mount opened after this starts from the same look at the store. */
  async list(): Promise<Array<{ name: string; model?: ResolvedModel; error?: StoreError }>> {
    const listing = listStore(this.store).then((l) => this.withFacts(l));
    // a mount opening later starts from this listing only if it still is the last one
    if (this.opening === undefined) this.listing = listing;
    return listedModels(await listing);
  }

  /** The listing with each model's recorded facts, read all at once (prepare and the mount's first scan use them). */
  private async withFacts(listing: StoreListing): Promise<StoreListing> {
    const records = this.records;
    if (records === undefined) return listing;
    const facts = new WeakMap<ResolvedModel, RecordedFacts>();
    const profile = this.opts.profile ?? "native";
    await Promise.all(
      [...listing.resolvedBy.values()].map(async ({ entry }) => {
        if (!("model" in entry)) return;
        const found = await records.read(entry.model, profile);
        if (found !== undefined) facts.set(entry.model, found);
      }),
    );
    this.listedFacts = facts;
    return { ...listing, facts };
  }

  /** Whether a model needed translating (so the mount, or the fallback, was asked for). */
  get needed(): boolean {
    return this.opening !== undefined;
  }

  /** The mount, once a model needed it (undefined: none yet, or FUSE cannot be used). */
  async mounted(): Promise<StoreMount | undefined> {
    return (await this.opening?.catch(() => undefined))?.mount;
  }

  async prepare(resolved: ResolvedModel): Promise<PreparedModel> {
    // a model the mount shows already (its first scan shows every model of the store): no second parse
    const shown = this.current?.shown(resolved);
    if (shown !== undefined) {
      if (shown.asIs === undefined) return shown.prepared;
      const { mmproj: _mounted, ...prepared } = shown.prepared;
      return { ...prepared, modelPath: shown.asIs.model, ...(shown.asIs.mmproj !== undefined ? { mmproj: shown.asIs.mmproj } : {}) };
    }
    // recorded facts: a native model needs no parse, and one that needs translating is shown by the mount from its record
    const facts = this.listedFacts?.get(resolved) ?? (await this.records?.read(resolved, this.opts.profile ?? "native"));
    if (facts !== undefined && servedAsIs(facts)) {
      const layer = resolved.projectors[0];
      return preparedFromFacts(resolved, facts, { modelPath: resolved.modelPath, mmproj: facts.mmproj === "file" ? layer : undefined });
    }
    const env = this.opts.env ?? process.env;
    if (facts !== undefined) {
      // at the files the mount will show it as: the router can start while the daemon does
      const opening = this.openOnce();
      const point = await this.point;
      // once the mount is open (or known not to be), prepare as it does
      if (point === undefined || this.openEnded) {
        const opened = await opening;
        return (opened?.mount ?? this.opts.fallback).prepare(resolved);
      }
      const { prepared } = shownAt(point, this.opts.layout ?? "models-dir", resolved, facts);
      this.early.add(prepared.modelPath);
      if (prepared.mmproj !== undefined) this.early.add(prepared.mmproj);
      return prepared;
    }
    const versions = this.records ? await FactsRecords.versions(resolved).catch(() => undefined) : undefined;
    const views = await servedViews(resolved, env, this.opts.profile ?? "native");
    try {
      // nothing to translate: the files are what llama.cpp reads
      if (views.text === null && views.mmproj?.kind !== "view") {
        const prepared = preparedModel(resolved, views, { modelPath: resolved.modelPath, translated: false, cacheHit: false, mmproj: views.mmproj?.path });
        if (versions) await this.records!.write(resolved, this.opts.profile ?? "native", versions, factsOf(prepared, views.mmproj ? "file" : "none"));
        return prepared;
      }
    } finally {
      await views.close();
    }
    const opened = await this.openOnce();
    return (opened?.mount ?? this.opts.fallback).prepare(resolved);
  }

  /**
   * Rejects when files were handed out at the mount's paths (from recorded facts, while the
   * daemon was starting) and the store could not be mounted after all, or its first scan failed.
   */
  async settled(): Promise<void> {
    if (this.early.size === 0) return;
    const opened = await this.opening;
    if (opened === undefined) throw new MountError("MOUNT_FAILED", `the store could not be mounted (${this.whyNot ?? "no reason given"}); serve with --no-mount to use the translation cache`);
  }

  /**
   * Resolves once the model's files can be opened by llama-server: the mount plans a model shown
   * from its recorded facts when it is first used (a request waits for that, it does not fail).
   */
  async ready(resolved: ResolvedModel): Promise<void> {
    await this.settled();
    await (await this.mounted())?.ready(resolved);
  }

  notYetPlanned(path: string): boolean {
    return this.current?.notYetPlanned(path) ?? this.early.has(path);
  }

  /** Unmounts, if a model needed the mount (llama-server should be stopped first). */
  async close(): Promise<void> {
    this.closed = true;
    this.closing.abort();
    const opened = await this.opening?.catch(() => undefined);
    if (!opened) return;
    await opened.mount.close();
    await rm(opened.dir, { recursive: true, force: true }).catch(() => undefined);
  }

  /** The mount, opened at the first model that needs it (its mount point known as soon as its folder is made). */
  private openOnce(): Promise<{ mount: StoreMount; dir: string } | undefined> {
    if (this.opening === undefined) {
      let placed!: (point: string | undefined) => void;
      this.point = new Promise((r) => (placed = r));
      this.opening = this.open(placed).finally(() => {
        placed(undefined);
        this.openEnded = true;
      });
      // awaited by whoever needs it (prepare, settled, close)
      this.opening.catch(() => undefined);
    }
    return this.opening;
  }

  private async open(placed: (point: string) => void): Promise<{ mount: StoreMount; dir: string } | undefined> {
    if (this.closed) throw new MountError("MOUNT_FAILED", "the serve is stopping: not mounting the store");
    const { fallback: _fallback, onNoMount, factsDir: _factsDir, ...opts } = this.opts;
    const support = fuseSupport(opts.env);
    if (!support.usable) {
      this.whyNot = support.reason;
      onNoMount?.(support.reason);
      return undefined;
    }
    // a folder of this process's own: one a SIGKILLed serve left behind goes with the next start
    const dir = await ownedTempDir("ollama-compat-mount-");
    try {
      // the daemon mounts at this path as resolved (FuseMount: realpath), and shows models under it
      const point = join(realpathSync(dir), "models");
      placed(point);
      // a daemon that dies is started again: the router's presets name paths in this folder
      const factsDir = this.records?.dir;
      const listed = this.listing;
      this.listing = undefined;
      const signal = opts.signal !== undefined ? AbortSignal.any([opts.signal, this.closing.signal]) : this.closing.signal;
      this.current = await StoreMount.open({ ...opts, signal, store: this.store, dir: point, restart: true, ...(factsDir !== undefined ? { factsDir } : {}), ...(listed !== undefined ? { listed } : {}) });
      return { mount: this.current, dir };
    } catch (e) {
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      if (e instanceof MountError && (e.code === "MOUNT_FAILED" || e.code === "FUSE_UNAVAILABLE")) {
        this.whyNot = e.message;
        onNoMount?.(e.message);
        return undefined;
      }
      throw e;
    }
  }
}
