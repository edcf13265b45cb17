/**
 * `migrate`: rewrites the Ollama-format models of a store into llama.cpp's own layout, in place,
 * so that every tool (Ollama itself, llama-server, LM Studio, RamaLama) loads the blobs as they
 * are and no translator is needed any more.
 *
 * Per model (one manifest):
 * - the model layer becomes the translated text GGUF: exactly the bytes `translate -o` writes
 *   (the same view and writer), so its sha256 is the same;
 * - a tower embedded in the model file becomes an `application/vnd.ollama.image.projector` layer
 *   right after it, exactly what `translate --mmproj` writes; a separate projector layer that
 *   needs translating (old LLaVA) is replaced by its translation;
 * - every other layer (template, system, params, messages, license, adapter, draft), every
 *   other field of the manifest and the config blob stay as they are, byte for byte.
 *
 * Why the config blob stays: Ollama reads model_format (still gguf), model_family(ies),
 * renderer, parser, requires, capabilities and draft from it, and none of those depends on the
 * GGUF's layout: `ollama create` of the native file would only fill the empty ones from the file
 * (cmp.Or) and count fewer parameters in model_type (the tower is no longer in the model layer),
 * and changing any of them would change what Ollama derives (gpt-oss thinking and Nemotron's
 * audio suppression key on model_family, the renderer and parser choose the prompt format).
 * rootfs.diff_ids, which registry configs carry, is read by nothing in Ollama. What Ollama derives
 * from the files instead (server/images.go Capabilities, GetModel) is checked before a manifest
 * switches (derivedFacts): the chat template (the template choice, tools, thinking), pooling
 * (embedding), vision (the model's vision keys before, the projector layer after, which
 * llm/llama_server.go passes as --mmproj) and audio (the model's audio keys before, the
 * projector's has_audio_encoder after, with Ollama's suppressions); a model where any of them
 * would differ is left alone, with the difference as its reason.
 *
 * Models that share a source blob (one blob, many names) are translated once, also across runs
 * (a name switched by an interrupted run lends its new blobs to the others: migratedSources). Each model is
 * loaded by real llama-server before its manifest switches (the caller's `verify`).
 *
 * Models are pipelined one deep (migrateGroups): the next model's files are written while the
 * model before it finishes (its digest, facts, verification and manifest switch), so the disk
 * does not idle between models. Disk: the free space checked first counts every model's new
 * blobs, and the store never holds more, since nothing is deleted before `--prune`; the new
 * blobs no manifest names yet are at most two models' (one finishing, the next being written).
 *
 * Undo: the replaced manifest is kept, byte for byte, as a manifest of its own under
 * manifests/ (@compat/store's rollbackName: host `ollama-compat-undo.<host>`), so Ollama's startup prune
 * (PruneLayers deletes blobs no manifest references) keeps the old blobs. `undoMigration`
 * writes it back and drops the record; `pruneMigration` drops the records and deletes the blobs
 * nothing references any more (older than Ollama's own hour of grace).
 *
 * Crash safety (@compat/store's writes): new blobs get their `sha256-<hex>` name only when complete and
 * hashed; the rollback record is written before the manifest switches; every manifest is
 * replaced by one rename. So `kill -9` at any moment leaves every manifest naming complete blobs,
 * and a second run skips what is native already and redoes the models that were in progress.
 * One migration per store at a time (a lock in blobs/.ollama-compat-tmp).
 */
import { constants as fsConstants } from "node:fs";
import { copyFile, mkdir, readFile, readdir, rm, stat, statfs, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { acquireLock, kernelRangeCopier, tempPathFor } from "@compat/files";
import { readGguf } from "@compat/gguf";
import { compatEnabled, type TranslatedView, type TranslationProfile } from "@compat/handlers";
import { nativeFileCopy } from "@compat/tensor-ops";
import { openViews, type ModelViews } from "@compat/views";
import {
  addBlob,
  blobDigest,
  blobStaging,
  displayName,
  fsyncDir,
  fullName,
  isRollbackName,
  manifestStaging,
  MediaType,
  ModelStore,
  OutputHasher,
  parseManifest,
  parseModelName,
  readManifestText,
  removeManifest,
  rollbackName,
  rolledBackName,
  StoreError,
  sweepStaging,
  writeManifest,
  type BlobHash,
  type ManifestLayer,
  type ModelName,
  type ResolvedModel,
  type WrittenBlob,
} from "@compat/store";

/** Ollama's PruneLayers leaves blobs younger than this alone (server/images.go layerPruneGracePeriod); so does pruneMigration. */
export const PRUNE_GRACE_MS = 60 * 60 * 1000;

/** Room kept free beyond the bytes a migration writes (manifests, file system overhead). */
const HEADROOM = 64 << 20;

export interface MigrateOptions {
  /** The store (default $OLLAMA_MODELS, else ~/.ollama/models). */
  root?: string;
  env?: Record<string, string | undefined>;
  /** Models to migrate (`gemma3:4b`, …); every model when empty or absent. */
  names?: readonly string[];
  profile?: TranslationProfile;
  /**
   * Loads a migrated pair before its manifests switch; throws to keep the old manifests. Given
   * the new blobs' paths. Absent: no verification (`--no-verify`).
   */
  verify?: (pair: MigratedPair) => Promise<void>;
  /** Told the plan once the store is locked and the space checked, before anything is written. */
  onPlan?: (plan: MigrationPlan) => void;
  /** A line of progress for people. */
  onProgress?: (line: string) => void;
}

export interface MigratedPair {
  /** The names this pair serves (a shared blob serves several). */
  names: string[];
  modelPath: string;
  mmproj?: string;
  embedding: boolean;
  params: Record<string, unknown>;
}

export interface PlannedChange {
  layer: "model" | "projector";
  /** The layer replaced (`sha256:<hex>`), or null for a projector layer added. */
  from: string | null;
  /** What is written: the translated text GGUF, the embedded tower, or a translated projector file. */
  what: "translated text" | "embedded tower" | "translated projector";
  bytes: number;
}

export interface PlannedModel {
  name: string;
  changes: PlannedChange[];
  /** Bytes this model adds (0 when it shares its source blob with a model before it). */
  bytes: number;
  /** Another model whose source blob this one shares: migrated once, with that one. */
  sharesWith?: string;
  /** An earlier run migrated another name of the same source blob: its new blobs are reused, nothing is written. */
  reused?: boolean;
}

export interface MigrationPlan {
  store: string;
  models: PlannedModel[];
  /** Left alone, one reason each. */
  skipped: Array<{ name: string; reason: string }>;
  /** Bytes written at most (less where the file system shares extents). */
  bytesNeeded: number;
  freeBytes: number;
  /** Whether new blobs share extents with the old ones (reflinks): then a model costs its headers and computed tensors. */
  reflinks: "yes" | "no" | "maybe";
  reflinksDetail: string;
  /** Source blobs that serve more than one model. */
  shared: Array<{ digest: string; names: string[] }>;
}

export interface MigrateResult {
  plan: MigrationPlan;
  migrated: Array<{ name: string; model: string; projector?: string; verified: boolean }>;
  /** Planned models left alone after all: a derived capability would change, verification failed, the manifest changed meanwhile. */
  failed: Array<{ name: string; reason: string }>;
}

/** One migration unit: the models that share a source model blob (and projector). */
interface Group {
  key: string;
  models: Array<{ n: ModelName; resolved: ResolvedModel; manifestText: string }>;
  textBytes: number;
  mmprojBytes: number;
  embeddedTower: boolean;
  /** What a model of the same source blob already switched to (an interrupted run's): reused, not translated again. */
  done?: { model: ManifestLayer; projector?: ManifestLayer };
}

/** The plan of a migration, writing nothing. */
export async function planMigration(opts: MigrateOptions = {}): Promise<MigrationPlan> {
  return (await survey(opts)).plan;
}

/** Migrates the chosen models (see the top of this file); the plan is told through onProgress first. */
export async function migrateStore(opts: MigrateOptions = {}): Promise<MigrateResult> {
  const store = new ModelStore(opts.root, opts.env ?? process.env);
  await checkWritable(store.root);
  const release = await lockStore(store.root);
  try {
    await sweepStaging(store.root);
    const { plan, groups } = await survey(opts, true);
    if (plan.bytesNeeded + HEADROOM > plan.freeBytes && plan.reflinks !== "yes") {
      throw new StoreError(
        "NO_SPACE",
        `migrating needs up to ${plan.bytesNeeded} bytes in ${store.root} and ${plan.freeBytes} are free; nothing was changed (migrate fewer models at a time, or free space)`,
        { needed: plan.bytesNeeded, free: plan.freeBytes },
      );
    }
    opts.onPlan?.(plan);
    const result: MigrateResult = { plan, migrated: [], failed: [] };
    await migrateGroups(store, groups, opts, result);
    return result;
  } finally {
    await release();
  }
}

async function survey(opts: MigrateOptions, writing = false): Promise<{ plan: MigrationPlan; groups: Group[] }> {
  const env = opts.env ?? process.env;
  if (!compatEnabled(env)) {
    throw new StoreError("COMPAT_DISABLED", "OLLAMA_LLAMA_CPP_COMPAT=0 means translate nothing, so migrate does nothing; unset it to migrate");
  }
  const store = new ModelStore(opts.root, env);
  const names = await chosenNames(store, opts.names);
  // a model named but not installed is a typo to say before anything, not a model to skip
  for (const n of opts.names?.length ? names : []) {
    if (!(await stat(store.manifestPath(n)).then((st) => st.isFile(), () => false))) {
      throw new StoreError("UNKNOWN_MODEL", `model ${JSON.stringify(displayName(n))} is not installed (no manifest at ${store.manifestPath(n)}); nothing was changed`, { name: displayName(n) });
    }
  }
  const skipped: MigrationPlan["skipped"] = [];
  const groups = new Map<string, Group>();
  const done = await migratedSources(store);
  for (const n of names) {
    const name = displayName(n);
    if (isRollbackName(n)) {
      skipped.push({ name, reason: "a rollback record of migrate (migrate --undo restores it, --prune drops it)" });
      continue;
    }
    let manifestText: string;
    let resolved: ResolvedModel;
    try {
      manifestText = await readManifestText(store.manifestPath(n));
      const manifest = parseManifest(manifestText, store.manifestPath(n));
      if (manifest.layers.some((l) => l.mediaType === MediaType.tensor)) {
        skipped.push({ name, reason: "a safetensors model (image.tensor layers): llama.cpp cannot load it, there is no GGUF to rewrite" });
        continue;
      }
      resolved = await store.resolveName(n);
    } catch (e) {
      skipped.push({ name, reason: `cannot be read: ${firstLine(e)}` });
      continue;
    }
    const views = await openViews(resolved.modelPath, { env, projectors: resolved.projectors, ...(opts.profile ? { profile: opts.profile } : {}) }).catch((e: unknown) => e as Error);
    if (views instanceof Error) {
      skipped.push({ name, reason: `cannot be read: ${firstLine(views)}` });
      continue;
    }
    try {
      if (views.status === "native") {
        skipped.push({ name, reason: "native: llama.cpp loads it as it is" });
        continue;
      }
      if (views.status !== "supported") {
        skipped.push({ name, reason: `no handler of this version supports architecture "${views.architecture}", and llama.cpp does not know it` });
        continue;
      }
      const key = `${resolved.modelDigest}|${resolved.projectors[0] ?? ""}`;
      let g = groups.get(key);
      if (!g) {
        const mm = views.mmproj?.kind === "view" ? views.mmproj.view : null;
        g = { key, models: [], textBytes: views.text?.size ?? 0, mmprojBytes: mm?.size ?? 0, embeddedTower: mm !== null && resolved.projectors.length === 0 };
        const earlier = done.get(key);
        if (earlier && (await layerPresent(store, earlier.model)) && (!earlier.projector || (await layerPresent(store, earlier.projector)))) {
          g.done = earlier;
        }
        groups.set(key, g);
      }
      g.models.push({ n, resolved, manifestText });
    } finally {
      await views.close();
    }
  }

  const models: PlannedModel[] = [];
  const shared: MigrationPlan["shared"] = [];
  for (const g of groups.values()) {
    const first = g.models[0]!;
    const changes: PlannedChange[] = [];
    if (g.textBytes > 0) changes.push({ layer: "model", from: first.resolved.modelDigest!, what: "translated text", bytes: g.textBytes });
    if (g.mmprojBytes > 0) {
      changes.push(
        g.embeddedTower
          ? { layer: "projector", from: null, what: "embedded tower", bytes: g.mmprojBytes }
          : { layer: "projector", from: projectorDigest(first.manifestText), what: "translated projector", bytes: g.mmprojBytes },
      );
    }
    g.models.forEach((m, i) =>
      models.push({
        name: displayName(m.n),
        changes,
        bytes: i === 0 && !g.done ? g.textBytes + g.mmprojBytes : 0,
        ...(i > 0 ? { sharesWith: displayName(first.n) } : {}),
        ...(g.done ? { reused: true } : {}),
      }),
    );
    if (g.models.length > 1) shared.push({ digest: first.resolved.modelDigest!, names: g.models.map((m) => displayName(m.n)) });
  }
  const fsInfo = await statfs(store.root).catch(() => undefined);
  const reflinks = writing ? await probeReflinks(store.root) : reflinksByType(fsInfo?.type);
  const plan: MigrationPlan = {
    store: store.root,
    models,
    skipped,
    bytesNeeded: models.reduce((s, m) => s + m.bytes, 0),
    freeBytes: fsInfo ? fsInfo.bavail * fsInfo.bsize : 0,
    reflinks: reflinks.answer,
    reflinksDetail: reflinks.detail,
    shared,
  };
  return { plan, groups: [...groups.values()] };
}

/** A group under way: `written` settles once its files' bytes are written (true: every write succeeded), `done` once it has switched, failed or stopped. */
interface GroupRun {
  written: Promise<boolean>;
  done: Promise<void>;
  /** Set once `done` rejected: an error that ends the run. */
  fatal: boolean;
}

/**
 * The groups in order, pipelined one deep: a group's files are written while the group before
 * it finishes (the digest of its last bytes, the facts of its new files, its verification, its
 * manifest switch). That tail writes nothing big, and run one after the other it left the disk
 * idle between models (~0.5 s a model: strace of five 256 MiB models). At most two groups are in
 * flight: a group starts once the one before it has written its bytes and the one before that
 * has finished; each group's tail waits for the tail before it, so manifests switch in order. An
 * error that ends the run (a full disk, a failed write) ends it as before: the group after it
 * stops its writes and removes what it wrote, and the first such error in group order is thrown
 * once every group started has settled.
 */
async function migrateGroups(store: ModelStore, groups: readonly Group[], opts: MigrateOptions, result: MigrateResult): Promise<void> {
  const runs: GroupRun[] = [];
  for (const g of groups) {
    // its header parsed and planned while the group before writes: ready when the disk is
    const views = groupViews(g, opts);
    views.catch(() => undefined); // its failure is the group's own, thrown once it starts
    const last = runs.at(-1);
    const beforeLast = runs.at(-2);
    let go = !last || (await last.written);
    if (go && beforeLast) await beforeLast.done.catch(() => undefined); // one group ahead at most
    go &&= !runs.some((r) => r.fatal);
    if (!go) {
      // a write failed or an error ended the run: no group starts after it
      await views.then((v) => v.close(), () => undefined);
      break;
    }
    runs.push(startGroup(store, g, opts, result, last?.done, views));
  }
  const outcomes = await Promise.allSettled(runs.map((r) => r.done));
  const failure = outcomes.find((o) => o.status === "rejected");
  if (failure) throw failure.reason;
}

/** The views of a group's source (its first model's files). */
function groupViews(g: Group, opts: MigrateOptions): Promise<ModelViews> {
  const first = g.models[0]!.resolved;
  return openViews(first.modelPath, { env: opts.env ?? process.env, projectors: first.projectors, ...(opts.profile ? { profile: opts.profile } : {}) });
}

function startGroup(store: ModelStore, g: Group, opts: MigrateOptions, result: MigrateResult, previous: Promise<void> | undefined, views: Promise<ModelViews>): GroupRun {
  const stop = new AbortController();
  // the group before ended the run: this one's writes stop (its error is the one reported)
  const previousOk = previous ? previous.then(() => true, () => (stop.abort(), false)) : Promise.resolve(true);
  let wrote!: (ok: boolean) => void;
  const written = new Promise<boolean>((resolve) => (wrote = resolve));
  const run: GroupRun = { written, done: migrateGroup(store, g, opts, result, views, { signal: stop.signal, wrote, previousOk }), fatal: false };
  run.done.then(
    () => wrote(false),
    () => {
      run.fatal = true;
      wrote(false);
    },
  );
  return run;
}

interface GroupPipe {
  /** Stops this group's writes. */
  signal: AbortSignal;
  /** Told once this group's files are written (or failed): the next group may start writing. */
  wrote: (ok: boolean) => void;
  /** Whether the group before finished without ending the run; awaited before this group's tail. */
  previousOk: Promise<boolean>;
}

async function migrateGroup(store: ModelStore, g: Group, opts: MigrateOptions, result: MigrateResult, opened: Promise<ModelViews>, pipe: GroupPipe): Promise<void> {
  const say = opts.onProgress ?? (() => undefined);
  const names = g.models.map((m) => displayName(m.n));
  const fail = (reason: string) => {
    for (const name of names) result.failed.push({ name, reason });
    say(`${names.join(", ")}: left as it was: ${reason}`);
  };
  const first = g.models[0]!.resolved;
  const created: WrittenBlob[] = [];
  let switched = false;
  try {
    const views = await opened;
    /** A layer's blob: written (what, size: for a failure's message) or reused. */
    let jobs: Array<{ what: string; size: number; blob: Promise<WrittenBlob> } | WrittenBlob | undefined>;
    let beforeFacts: Promise<Facts>;
    let settled: Array<PromiseSettledResult<WrittenBlob | undefined>>;
    try {
      const mm = views.mmproj?.kind === "view" ? views.mmproj.view : null;
      if (g.done) say(`${names.join(", ")}: reusing the blobs a model of the same source was migrated to`);
      else say(`${names.join(", ")}: writing ${[views.text ? `the text GGUF (${views.text.size} bytes)` : "", mm ? `the projector (${mm.size} bytes)` : ""].filter(Boolean).join(" and ")}`);
      const reused = (l: ManifestLayer | undefined): WrittenBlob | undefined => (l ? { digest: l.digest, size: l.size, path: store.blobPath(l.digest), created: false } : undefined);
      const bytesWritten: Array<Promise<boolean>> = [];
      const write = (what: string, view: TranslatedView) => {
        let mark!: (ok: boolean) => void;
        bytesWritten.push(new Promise<boolean>((resolve) => (mark = resolve)));
        const blob = addBlob(store.root, (p) => writeHashed(view, p, pipe.signal, () => mark(true)));
        blob.then(() => mark(true), () => mark(false));
        return { what, size: view.size, blob };
      };
      // The source's facts are read, and the two files written, at once: a model's time is its
      // bytes on the disk, and one after the other the projector's computed tensors, each file's
      // final flush and this header parse each left the disk idle in turn. Both writes are
      // awaited before either's failure is thrown, so every blob made is known to the cleanup.
      beforeFacts = derivedFacts(first.modelPath, first.projectors);
      beforeFacts.catch(() => undefined); // awaited below, unless a write fails first
      jobs = [
        views.text ? (reused(g.done?.model) ?? write("the text GGUF", views.text)) : undefined,
        mm ? (reused(g.done?.projector) ?? write("the projector", mm)) : undefined,
      ];
      // every byte is written and fsynced, only the digest's last stretch is left: the next group may write
      void Promise.all(bytesWritten).then((oks) => pipe.wrote(oks.every(Boolean)));
      settled = await Promise.allSettled(jobs.map((j) => (j && "blob" in j ? j.blob : j)));
    } finally {
      await views.close();
    }
    const [textWrite, projectorWrite] = settled as [PromiseSettledResult<WrittenBlob | undefined>, PromiseSettledResult<WrittenBlob | undefined>];
    for (const w of settled) if (w.status === "fulfilled" && w.value?.created) created.push(w.value);
    // the group before switches (or fails) first; if that ended the run, this group only cleans up
    if (!(await pipe.previousOk)) return;
    for (const [i, w] of settled.entries()) {
      const job = jobs[i];
      if (w.status !== "rejected" || !job || !("blob" in job)) continue;
      throw (await spaceError(w.reason, store.root, job.size, `${job.what} of ${names.join(", ")} (${job.size} bytes, from ${first.modelDigest})`, result)) ?? w.reason;
    }
    const text = textWrite.status === "fulfilled" ? textWrite.value : undefined;
    const projector = projectorWrite.status === "fulfilled" ? projectorWrite.value : undefined;

    const newProjectors = projector ? [projector.path, ...first.projectors.slice(1)] : first.projectors;
    const before = await beforeFacts;
    const after = await derivedFacts(text?.path ?? first.modelPath, newProjectors);
    const differs = (Object.keys(before) as Array<keyof Facts>).filter((k) => before[k] !== after[k]);
    if (differs.length > 0) return fail(`what Ollama derives from the files would change (${differs.join(", ")})`);

    const pair: MigratedPair = {
      names,
      modelPath: text?.path ?? first.modelPath,
      ...(newProjectors[0] !== undefined ? { mmproj: newProjectors[0] } : {}),
      embedding: after.embedding,
      params: first.params,
    };
    if (opts.verify) {
      say(`${names.join(", ")}: loading the migrated files in llama-server`);
      try {
        await opts.verify(pair);
      } catch (e) {
        return fail(`llama-server did not serve the migrated files: ${firstLine(e)}`);
      }
    }
    for (const m of g.models) {
      const name = displayName(m.n);
      const path = store.manifestPath(m.n);
      const now = await readManifestText(path).catch(() => undefined);
      if (now !== m.manifestText) {
        result.failed.push({ name, reason: "its manifest changed while migrating (pulled again?); run migrate again" });
        continue;
      }
      const r = rollbackName(m.n);
      if (r === null) {
        result.failed.push({ name, reason: "its host name is too long for a rollback record's name" });
        continue;
      }
      await writeManifest(store.root, store.manifestPath(r), m.manifestText);
      await writeManifest(store.root, path, rewrittenManifest(m.manifestText, m.resolved.modelDigest!, text, projector, g.embeddedTower));
      switched = true;
      result.migrated.push({ name, model: text?.digest ?? m.resolved.modelDigest!, ...(projector ? { projector: projector.digest } : {}), verified: opts.verify !== undefined });
      say(`${name}: migrated (model ${text?.digest ?? "kept"}${projector ? `, projector ${projector.digest}` : ""})`);
    }
  } finally {
    // blobs no manifest took are not left behind (a failed verification, a disk full meanwhile)
    if (!switched) for (const b of created) await unlink(b.path).catch(() => undefined);
  }
}

/**
 * Writes `view` to `path` as `translate` does (the same writer, kernel range copies) and returns
 * its sha256, hashed on the way (OutputHasher): the blob is never read back to learn its name.
 * The copier is always given, wrapped (one that declines when there is no kernel call), so no
 * byte reaches the file without passing the hasher; the size check catches one that did.
 */
async function writeHashed(view: TranslatedView, path: string, signal: AbortSignal, onWritten: () => void): Promise<BlobHash> {
  const hasher = new OutputHasher();
  try {
    const kernel = kernelRangeCopier(nativeFileCopy()) ?? (async () => false);
    // checked before each kernel copy too: one run of tensors can be most of the file
    const copyRange = hasher.copier(async (...a) => (signal.throwIfAborted(), kernel(...a)));
    await view.writeTo(path, { signal, copyRange, tee: (chunk) => hasher.bytes(chunk) });
    onWritten();
    const hash = await hasher.digest();
    if (hash.size !== view.size) throw new Error(`internal: hashed ${hash.size} bytes of a ${view.size}-byte output`);
    return hash;
  } finally {
    await hasher.close();
  }
}

/**
 * A full disk while writing a blob, in words: what was being written, that the partial blob is
 * gone and the model untouched, and what became of the models before it. Full means ENOSPC or
 * EDQUOT in the error's causes, or less room left than the blob needs once its partial file is
 * gone (the kernel's range copy reports only an errno). Any other failure: undefined.
 */
async function spaceError(e: unknown, root: string, bytes: number, writing: string, result: MigrateResult): Promise<StoreError | undefined> {
  let code: string | undefined;
  for (let c: unknown = e; c instanceof Error && code === undefined; c = (c as { cause?: unknown }).cause) {
    const own = (c as NodeJS.ErrnoException).code;
    if (own === "ENOSPC" || own === "EDQUOT") code = own;
  }
  const fsInfo = await statfs(root).catch(() => undefined);
  const free = fsInfo ? fsInfo.bavail * fsInfo.bsize : undefined;
  if (code === undefined && !(free !== undefined && free < bytes)) return undefined;
  const done = result.migrated.map((m) => m.name);
  const before = done.length > 0 ? `the ${done.length} model${done.length === 1 ? "" : "s"} migrated before it (${done.join(", ")}) stay migrated (migrate --undo restores them)` : "no model was changed";
  return new StoreError(
    "NO_SPACE",
    `the file system of ${root} filled up (${code ?? `${free} bytes free`}: ${firstLine(e)}) while writing ${writing}: the partial blob was removed and its manifest left as it was; ${before}; free space and run migrate again to continue`,
    { code, free, migrated: done },
  );
}

/**
 * What each source (model digest | projector path, as survey keys them) was migrated to, read
 * from the rollback records whose model's manifest has switched: a run interrupted between two
 * names of one blob then reuses the first one's blobs instead of translating again.
 */
async function migratedSources(store: ModelStore): Promise<Map<string, { model: ManifestLayer; projector?: ManifestLayer }>> {
  const out = new Map<string, { model: ManifestLayer; projector?: ManifestLayer }>();
  for (const r of (await store.manifestNames()).filter(isRollbackName)) {
    try {
      const old = parseManifest(await readManifestText(store.manifestPath(r)), store.manifestPath(r));
      const now = parseManifest(await readManifestText(store.manifestPath(rolledBackName(r))), store.manifestPath(rolledBackName(r)));
      const model = (m: typeof old) => m.layers.filter((l) => l.mediaType === MediaType.model).pop();
      const projector = (m: typeof old) => m.layers.find((l) => l.mediaType === MediaType.projector);
      const [oldModel, newModel] = [model(old), model(now)];
      if (!oldModel || !newModel || sameDigest(newModel.digest, oldModel.digest)) continue;
      const oldProjector = projector(old);
      const newProjector = projector(now);
      const key = `sha256:${oldModel.digest.toLowerCase().slice(-64)}|${oldProjector ? store.blobPath(oldProjector.digest) : ""}`;
      out.set(key, { model: newModel, ...(newProjector && !sameDigest(newProjector.digest, oldProjector?.digest ?? "") ? { projector: newProjector } : {}) });
    } catch {
      // a record or model that cannot be read offers nothing to reuse
    }
  }
  return out;
}

async function layerPresent(store: ModelStore, l: ManifestLayer): Promise<boolean> {
  return stat(store.blobPath(l.digest)).then((st) => st.isFile() && st.size === l.size, () => false);
}

/** The manifest with the model layer (and projector) replaced; every other byte of meaning kept. */
function rewrittenManifest(text: string, modelDigest: string, model: WrittenBlob | undefined, projector: WrittenBlob | undefined, embeddedTower: boolean): string {
  const raw = JSON.parse(text) as { layers: Array<Record<string, unknown>> };
  const layers: Array<Record<string, unknown>> = [];
  let projectorReplaced = false;
  for (const l of raw.layers) {
    if (l.mediaType === MediaType.model && sameDigest(l.digest, modelDigest)) {
      layers.push(model ? { ...l, digest: model.digest, size: model.size } : l);
      if (projector && embeddedTower) layers.push({ mediaType: MediaType.projector, digest: projector.digest, size: projector.size });
    } else if (l.mediaType === MediaType.projector && projector && !embeddedTower && !projectorReplaced) {
      layers.push({ ...l, digest: projector.digest, size: projector.size });
      projectorReplaced = true;
    } else layers.push(l);
  }
  // as Go's json.Encoder writes it: compact, one newline
  return JSON.stringify({ ...raw, layers }) + "\n";
}

/**
 * What Ollama derives from the model and projector files (server/images.go), compared before
 * and after. Of the GGUF's chat template, only what Ollama's Go side decides with it counts: the
 * tools and thinking capabilities and whether it prefers that template to the Go one (which also
 * weighs tool round trips). A translation that adds a template (Ollama's gemma3 files have none)
 * thus changes nothing when that template offers no tools or thinking: Ollama keeps its Go
 * template, and without one, llama.cpp renders with the template of the file it loads, which
 * Ollama's own compat layer already gave it.
 */
interface Facts {
  chatTools: boolean;
  chatThinking: boolean;
  chatToolRoundTrip: boolean;
  embedding: boolean;
  vision: boolean;
  audio: boolean;
}

async function derivedFacts(modelPath: string, projectors: readonly string[]): Promise<Facts> {
  const m = await readGguf(modelPath);
  let f: Facts;
  let arch: string;
  try {
    arch = m.getString("general.architecture", "");
    const t = m.getString("tokenizer.chat_template", "");
    f = {
      ...chatTemplateFacts(t),
      embedding: m.has(`${arch}.pooling_type`),
      vision: m.has(`${arch}.vision.block_count`) || projectors.length > 0,
      audio: m.has(`${arch}.audio.block_count`),
    };
  } finally {
    await m.close();
  }
  for (const p of projectors) {
    const pm = await readGguf(p);
    try {
      const parch = pm.getString("general.architecture", "");
      const audio = pm.kvs().some((kv) => (kv.key === `${parch}.has_audio_encoder` || kv.key.endsWith(".has_audio_encoder")) && kv.value === true);
      if (audio && pm.getString(`${parch}.vision.projector_type`, "") !== "gemma3nv") f.audio = true;
    } finally {
      await pm.close();
    }
  }
  // Ollama hides Nemotron 3 omni's audio whatever the files say
  if (arch === "nemotron_h_omni") f.audio = false;
  return f;
}

/** server/images.go chatTemplateHasToolSupport, ...HasThinkingSupport, ...HasToolRoundTrip. */
function chatTemplateFacts(t: string): Pick<Facts, "chatTools" | "chatThinking" | "chatToolRoundTrip"> {
  const tools = t.includes("tools") || t.includes("tool_call");
  const toolCalls = t.includes("tool_calls") || t.includes("assistant_tool_call");
  const toolAnswers = ["tool_response", "tool_results", "role'] == 'tool'", `role'] == "tool"`, `role"] == 'tool'`, `role"] == "tool"`, "message.role == 'tool'", `message.role == "tool"`, "ipython"].some((s) => t.includes(s));
  const thinking =
    (t.includes("<think>") && t.includes("</think>")) ||
    ((t.includes("content.split('</think>')") || t.includes(`content.split("</think>")`)) && !t.includes("reasoning_content") && !t.includes("<SPECIAL_12>"));
  return { chatTools: tools, chatThinking: thinking, chatToolRoundTrip: tools && toolCalls && toolAnswers };
}

export interface UndoResult {
  restored: string[];
  /** Names asked for that have no rollback record. */
  missing: string[];
}

/** Writes each rollback record back over its model's manifest (byte for byte) and drops the record. */
export async function undoMigration(opts: Pick<MigrateOptions, "root" | "env" | "names" | "onProgress"> = {}): Promise<UndoResult> {
  const store = new ModelStore(opts.root, opts.env ?? process.env);
  await checkWritable(store.root);
  const release = await lockStore(store.root);
  try {
    const { records, missing } = await chosenRecords(store, opts.names);
    const restored: string[] = [];
    for (const r of records) {
      const n = rolledBackName(r);
      const bytes = await readFile(store.manifestPath(r));
      parseManifest(bytes.toString("utf8"), store.manifestPath(r));
      // the record goes only once the manifest is back: a crash between leaves both, and undo again finishes
      await writeManifest(store.root, store.manifestPath(n), bytes);
      await removeManifest(store.root, store.manifestPath(r));
      restored.push(displayName(n));
      opts.onProgress?.(`${displayName(n)}: restored`);
    }
    return { restored, missing };
  } finally {
    await release();
  }
}

export interface PruneResult {
  droppedRecords: string[];
  removedBlobs: Array<{ digest: string; size: number }>;
  /** Unreferenced blobs younger than the grace period, left (a pull may be about to name them). */
  youngKept: number;
  missing: string[];
}

/**
 * Drops rollback records (the chosen models', else all), then deletes every blob no manifest
 * references that is older than PRUNE_GRACE_MS, as Ollama's prune would. Refuses to delete any
 * blob while a manifest cannot be read (it might reference them).
 */
export async function pruneMigration(opts: Pick<MigrateOptions, "root" | "env" | "names" | "onProgress"> & { graceMs?: number } = {}): Promise<PruneResult> {
  const store = new ModelStore(opts.root, opts.env ?? process.env);
  await checkWritable(store.root);
  const release = await lockStore(store.root);
  try {
    const { records, missing } = await chosenRecords(store, opts.names);
    const droppedRecords: string[] = [];
    for (const r of records) {
      await removeManifest(store.root, store.manifestPath(r));
      droppedRecords.push(displayName(rolledBackName(r)));
      opts.onProgress?.(`${displayName(rolledBackName(r))}: rollback record dropped`);
    }
    const referenced = new Set<string>();
    for (const n of await store.manifestNames()) {
      const path = store.manifestPath(n);
      let text: string;
      try {
        text = await readManifestText(path);
      } catch (e) {
        throw new StoreError("CORRUPT_MANIFEST", `${path} cannot be read (${firstLine(e)}); no blob was removed, since it may reference some`, { manifestPath: path });
      }
      const m = parseManifest(text, path);
      for (const l of [...m.layers, ...(m.config ? [m.config] : [])]) referenced.add(l.digest.toLowerCase().replace(":", "-"));
    }
    const removedBlobs: PruneResult["removedBlobs"] = [];
    let youngKept = 0;
    const blobs = join(store.root, "blobs");
    const grace = opts.graceMs ?? PRUNE_GRACE_MS;
    for (const entry of await readdir(blobs).catch(() => [] as string[])) {
      if (blobDigest(entry) === undefined || referenced.has(entry)) continue;
      const st = await stat(join(blobs, entry)).catch(() => undefined);
      if (!st?.isFile()) continue;
      if (Date.now() - st.mtimeMs < grace) {
        youngKept++;
        continue;
      }
      await unlink(join(blobs, entry));
      removedBlobs.push({ digest: entry.replace("-", ":"), size: st.size });
    }
    if (removedBlobs.length > 0) await fsyncDir(blobs);
    await sweepStaging(store.root);
    return { droppedRecords, removedBlobs, youngKept, missing };
  } finally {
    await release();
  }
}

/** The models asked for (parsed), else every model of the store. */
async function chosenNames(store: ModelStore, refs: readonly string[] | undefined): Promise<ModelName[]> {
  if (!refs || refs.length === 0) return store.names();
  return refs.map((ref) => {
    const n = parseModelName(ref);
    if (!n) throw new StoreError("INVALID_REFERENCE", `${JSON.stringify(ref)} is not an Ollama model name ([host/][namespace/]model[:tag])`, { ref });
    return n;
  });
}

/** The rollback records of the models asked for (else all of them), and the names that have none. */
async function chosenRecords(store: ModelStore, refs: readonly string[] | undefined): Promise<{ records: ModelName[]; missing: string[] }> {
  const all = (await store.manifestNames()).filter(isRollbackName);
  if (!refs || refs.length === 0) return { records: all, missing: [] };
  const records: ModelName[] = [];
  const missing: string[] = [];
  for (const n of await chosenNames(store, refs)) {
    const r = all.find((x) => fullName(rolledBackName(x)).toLowerCase() === fullName(n).toLowerCase());
    if (r) records.push(r);
    else missing.push(displayName(n));
  }
  return { records, missing };
}

/**
 * A store that cannot be written is refused before anything happens, with the reason: the
 * staging folders are made and a file written in each (root passes access(); a read-only mount
 * still refuses a write).
 */
async function checkWritable(root: string): Promise<void> {
  for (const dir of [manifestStaging(root), blobStaging(root)]) {
    try {
      await mkdir(dir, { recursive: true });
      const probe = tempPathFor(join(dir, "probe"));
      await writeFile(probe, "");
      await rm(probe, { force: true });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? "";
      const top = join(dir, "..");
      const why = code === "EROFS" ? "is on a read-only file system" : code === "ENOENT" ? "does not exist (not an Ollama store?)" : `cannot be written (${code || firstLine(e)})`;
      throw new StoreError("STORE_UNWRITABLE", `${top} ${why}: migrate rewrites the store in place; nothing was changed`, { path: top, code });
    }
  }
}

async function lockStore(root: string): Promise<() => Promise<void>> {
  await mkdir(blobStaging(root), { recursive: true });
  return acquireLock(join(blobStaging(root), "migrate.lock"), { timeoutMs: 2_000, staleMs: 60_000, what: `the store ${root} (another migrate is running)` });
}

/**
 * Whether a clone of a file in the store shares its extents: a 64 KiB probe cloned with
 * FICLONE (copyFile's COPYFILE_FICLONE_FORCE), removed at once.
 */
async function probeReflinks(root: string): Promise<{ answer: "yes" | "no"; detail: string }> {
  const dir = blobStaging(root);
  const a = tempPathFor(join(dir, "reflink-probe"));
  const b = tempPathFor(join(dir, "reflink-clone"));
  try {
    await writeFile(a, Buffer.alloc(64 << 10, 1));
    await copyFile(a, b, fsConstants.COPYFILE_FICLONE_FORCE);
    return { answer: "yes", detail: "the file system clones files (reflinks): a migrated model costs its headers and computed tensors" };
  } catch {
    return { answer: "no", detail: "the file system does not share extents (no reflinks): each migrated model is written in full" };
  } finally {
    await rm(a, { force: true });
    await rm(b, { force: true });
  }
}

/** For a dry run, which writes nothing: what the file system type says. */
function reflinksByType(type: number | undefined): { answer: "yes" | "no" | "maybe"; detail: string } {
  if (type === 0x9123683e) return { answer: "yes", detail: "Btrfs shares extents (reflinks): a migrated model costs its headers and computed tensors" };
  if (type === 0x58465342) return { answer: "maybe", detail: "XFS shares extents when made with reflink=1 (the default since xfsprogs 5.1); migrate checks before writing" };
  return { answer: "no", detail: "the file system does not share extents (no reflinks): each migrated model is written in full" };
}

function projectorDigest(manifestText: string): string | null {
  const raw = JSON.parse(manifestText) as { layers: Array<{ mediaType: string; digest: string }> };
  return raw.layers.find((l) => l.mediaType === MediaType.projector)?.digest ?? null;
}

function sameDigest(a: unknown, b: string): boolean {
  return typeof a === "string" && a.toLowerCase().replace("-", ":") === b.toLowerCase().replace("-", ":");
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0]!;
}
