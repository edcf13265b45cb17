import { createHash } from "node:crypto";
import { rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { GgufError, readTensorData } from "@compat/gguf";
import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { openViews, projectorOf, type FileStatus, type Mmproj } from "@compat/views";
import { ownedTempDir } from "@compat/files";
import { FuseMount, fuseSupport, MountError, planView, SidecarStore, type ComputedPart, type MountExit } from "@compat/mount";
import { defaultCacheDir, TRANSLATOR_VERSION } from "./cache";
import { PrepareError } from "./errors";
import { modelFiles, type ModelsLayout } from "./layout";
import { modelFacts, type PreparedModel } from "./prepare";
import { ModelStore, type ResolvedModel } from "@compat/store";

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
  /** Look for models added to or removed from the store this often (default 2000 ms; 0: never). */
  rescanMs?: number;
  env?: Record<string, string | undefined>;
  /** One line per model mounted, removed or not mounted, and the daemon's warnings. */
  onStatus?(line: string): void;
}

/** One model as the mount shows it. */
export interface MountedModel {
  name: string;
  /** Relative to the mount point. */
  files: { model: string; mmproj?: string };
  /** What llama-server needs to serve it from the mount (modelArgs). */
  prepared: PreparedModel;
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
 */
export class StoreMount {
  readonly dir: string;
  readonly store: ModelStore;
  readonly layout: ModelsLayout;
  /** Resolves when the mount is gone (closed, or its daemon died). */
  readonly exited: Promise<MountExit>;
  private readonly mount: FuseMount;
  private readonly opts: StoreMountOptions;
  private readonly env: Record<string, string | undefined>;
  private readonly mounted = new Map<string, MountedModel & { signature: string; paths: string[] }>();
  /** Models that could not be mounted: why (the error itself, for prepare to rethrow), and which version of them (not retried until it changes). */
  private readonly failed = new Map<string, { error: string; cause?: unknown; signature?: string }>();
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> = Promise.resolve();

  private constructor(mount: FuseMount, store: ModelStore, opts: StoreMountOptions) {
    this.mount = mount;
    this.dir = mount.dir;
    this.store = store;
    this.layout = opts.layout ?? "models-dir";
    this.opts = opts;
    this.env = opts.env ?? process.env;
    this.exited = mount.exited;
  }

  /** Mounts the store at `opts.dir` and shows its models (each that fails is reported, not fatal). */
  static async open(opts: StoreMountOptions): Promise<StoreMount> {
    const env = opts.env ?? process.env;
    const store = opts.store instanceof ModelStore ? opts.store : new ModelStore(opts.store, env);
    const sidecars = new SidecarStore(opts.sidecarDir ?? defaultSidecarDir(env));
    const mount = await FuseMount.mount(opts.dir, { sidecars, env, allowOther: opts.allowOther, onLog: (l) => opts.onStatus?.(`mount: ${l}`) });
    const sm = new StoreMount(mount, store, opts);
    try {
      await sm.sync();
    } catch (e) {
      await mount.close();
      throw e;
    }
    const every = opts.rescanMs ?? 2000;
    if (every > 0 && opts.models === undefined) {
      sm.timer = setInterval(() => void sm.sync().catch((e: Error) => opts.onStatus?.(`rescan failed: ${e.message}`)), every);
      sm.timer.unref();
    }
    void mount.exited.then(() => clearInterval(sm.timer));
    return sm;
  }

  /** The models shown now, by name. */
  models(): MountedModel[] {
    return [...this.mounted.values()].map(({ name, files, prepared }) => ({ name, files, prepared }));
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

  /** Brings the mount in line with the store: new models added, removed ones taken away, changed ones replaced. */
  sync(): Promise<void> {
    return this.queue(async () => {
      const wanted = await this.wanted();
      for (const [name, m] of this.mounted) {
        if (wanted.has(name)) continue;
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
        await this.add(entry.model);
      }
    });
  }

  /** Unmounts (llama-servers reading from it should be stopped first). */
  async close(): Promise<MountExit> {
    clearInterval(this.timer);
    await this.syncing.catch(() => undefined);
    return this.mount.close();
  }

  private queue(job: () => Promise<void>): Promise<void> {
    const run = this.syncing.then(job);
    this.syncing = run.catch(() => undefined);
    return run;
  }

  private async wanted(): Promise<Map<string, { model: ResolvedModel } | { error: string; cause: unknown }>> {
    const out = new Map<string, { model: ResolvedModel } | { error: string; cause: unknown }>();
    if (this.opts.models === undefined || this.opts.models === "all") {
      for (const e of await this.store.list()) out.set(e.name, e.model ? { model: e.model } : { error: e.error!.message, cause: e.error });
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

  private async drop(name: string, m: { paths: string[] }): Promise<void> {
    this.mounted.delete(name);
    for (const p of m.paths) await this.mount.remove(p).catch(() => undefined);
  }

  /** Mounts one model's files (replacing an earlier version of it). Failures are recorded, not thrown. */
  private async add(resolved: ResolvedModel): Promise<void> {
    const name = resolved.name;
    const old = this.mounted.get(name);
    if (old) await this.drop(name, old);
    this.failed.delete(name);
    try {
      const m = await this.mountModel(resolved);
      this.mounted.set(name, m);
      this.opts.onStatus?.(`${name} -> ${m.files.model}${m.files.mmproj ? ` + ${m.files.mmproj}` : ""} (${m.prepared.translated ? "translated" : "native"})`);
    } catch (e) {
      const why = e instanceof Error ? e.message.split("\n")[0]! : String(e);
      this.failed.set(name, { error: why, cause: e, signature: signature(resolved) });
      this.opts.onStatus?.(`${name}: not mounted: ${why}`);
    }
  }

  private async mountModel(resolved: ResolvedModel): Promise<MountedModel & { signature: string; paths: string[] }> {
    const profile = this.opts.profile ?? "native";
    const views = await servedViews(resolved, this.env, profile);
    try {
      const { text, mmproj: projector } = views;
      const files = modelFiles(name(resolved), this.layout, projector !== null);
      const paths: string[] = [];
      const sig = signature(resolved);
      // a file we translate is planned; a file llama.cpp takes as it is is a link to the blob
      const place = async (at: string, path: string, view: TranslatedView | null, kind: "text" | "mmproj") => {
        paths.push(at);
        if (view === null) return this.mount.addLink(at, path, BigInt(Math.round((await stat(path)).mtimeMs * 1e6)));
        const key = await this.fileKey(path, kind, profile, kind === "text" ? resolved.modelDigest : undefined);
        const { plan, computed } = await planView(view, { sidecarPath: (t, i) => this.mount.sidecars.pathFor(key, t, i) });
        const identity = plan.sources.find((src) => src.path === path);
        await this.mount.addFile(at, plan, this.reopening(computed, path, kind, profile, resolved, identity));
      };
      await place(files.model, resolved.modelPath, text, "text");
      let mmproj: string | undefined;
      if (projector?.kind === "file") await place(files.mmproj, projector.path, null, "mmproj");
      else if (projector?.kind === "view") await place(files.mmproj, projector.path ?? resolved.modelPath, projector.view, "mmproj");
      if (projector) mmproj = files.mmproj;
      const prepared: PreparedModel = {
        resolved,
        modelPath: join(this.dir, files.model),
        translated: text !== null,
        cacheHit: false,
        ...(mmproj ? { mmproj: join(this.dir, mmproj) } : {}),
        status: views.status,
        handlers: text?.report.handlers.map((h) => h.name) ?? [],
        ...views.facts,
      };
      return { name: resolved.name, files: { model: files.model, ...(mmproj ? { mmproj } : {}) }, prepared, signature: sig, paths };
    } finally {
      await views.close();
    }
  }

  /** The content key of a translated file: what it is made from, as the cache keys its entries. */
  private async fileKey(path: string, kind: "text" | "mmproj", profile: TranslationProfile, digest: string | undefined): Promise<string> {
    const blob = /sha256-([0-9a-f]{64})$/.exec(path);
    let from = digest ?? (blob ? `sha256:${blob[1]}` : undefined);
    if (from === undefined) {
      // a plain file: its identity now (a changed file is another key)
      const st = await stat(path, { bigint: true });
      from = `file:${path}:${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}`;
    }
    const id = JSON.stringify({ v: 1, source: from, translator: TRANSLATOR_VERSION, profile, kind });
    return createHash("sha256").update(id).digest("hex");
  }

  /**
   * The sidecars' producers, reading from the file again when the daemon first needs them (the
   * views are closed once planned: a mounted store holds no model's metadata in memory).
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
        const views = await servedViews(resolved, env, profile);
        try {
          const view = kind === "text" ? views.text : views.mmproj?.kind === "view" ? views.mmproj.view : null;
          if (view === null) throw new Error(`${path}: no longer translates`);
          const t = view.model.tensors[part.tensor.index];
          if (t?.name !== part.tensor.name) throw new Error(`${path}: ${part.label} is not in its translation any more`);
          const bytes = await readTensorData(t);
          await same();
          return bytes;
        } finally {
          await views.close();
        }
      },
    }));
  }
}

/** The served name of a model: its Ollama name, or a plain file's name without `.gguf`. */
function name(m: ResolvedModel): string {
  return m.kind === "file" ? m.name.replace(/\.gguf$/i, "") : m.name;
}

/** What llama-server gets from a model (@compat/views), with the facts its arguments depend on; close it when done. */
async function servedViews(
  resolved: ResolvedModel,
  env: Record<string, string | undefined>,
  profile: TranslationProfile,
): Promise<{ status: FileStatus; text: TranslatedView | null; mmproj: Mmproj | null; facts: Pick<PreparedModel, "architecture" | "embedding" | "hasChatTemplate">; close(): Promise<void> }> {
  try {
    const views = await openViews(resolved.modelPath, { env, profile, projectors: resolved.projectors });
    return { status: views.status, text: views.text, mmproj: views.mmproj, facts: modelFacts(views.model, views.text), close: () => views.close() };
  } catch (e) {
    // as prepareModel: a string that is not UTF-8 is for llama-server to judge, the file as it is
    if (!(e instanceof GgufError) || e.code !== "INVALID_UTF8") throw e;
  }
  const layer = resolved.projectors[0];
  const mmproj = layer !== undefined ? await projectorOf(layer, { env, profile }) : null;
  return {
    status: "native",
    text: null,
    mmproj,
    facts: { architecture: "", embedding: false, hasChatTemplate: true },
    close: async () => {
      if (mmproj?.kind === "view") await mmproj.view.close();
    },
  };
}

/** A mount made for one `serve`, or why there is none. */
export type ServeMount = { mount: StoreMount; close(): Promise<void> } | { mount: undefined; reason: string };

/**
 * A private mount of the store for a `serve` (in a temp folder, removed on close), or the
 * one-line reason FUSE cannot be used here (not Linux, no /dev/fuse, no daemon, the kernel
 * refused the mount): the caller then serves from the translation cache and says why.
 */
export async function serveMount(opts: Omit<StoreMountOptions, "dir">): Promise<ServeMount> {
  const support = fuseSupport(opts.env);
  if (!support.usable) return { mount: undefined, reason: support.reason };
  // a folder of this process's own: one a SIGKILLed serve left behind goes with the next start
  const dir = await ownedTempDir("ollama-compat-mount-");
  let mount: StoreMount;
  try {
    mount = await StoreMount.open({ ...opts, dir: join(dir, "models") });
  } catch (e) {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    if (e instanceof MountError && (e.code === "MOUNT_FAILED" || e.code === "FUSE_UNAVAILABLE")) return { mount: undefined, reason: e.message };
    throw e;
  }
  return {
    mount,
    async close() {
      await mount.close();
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    },
  };
}
