import { rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ownedTempDir } from "@compat/files";
import { PrepareError, type PreparedModel } from "@compat/prepare";
import { StoreError, type ResolvedModel } from "@compat/store";
import { modelArgs } from "./args";
import { BridgeError } from "./errors";
import { asStore, launch, preparerFor, type LaunchOptions, type RunningServer } from "./server";

export interface StartRouterOptions extends LaunchOptions {
  /** "all": every installed model; or a list of references. */
  models: "all" | readonly string[];
  /** Models loaded at once (llama-server --models-max). Default llama-server's (4). */
  modelsMax?: number;
  /** Keep the generated preset file after stop (for debugging). */
  keepPreset?: boolean;
  /**
   * The caller sends every request a model's stop words itself (the Ollama API does), so the
   * preset leaves them out: a preset holds one value per flag, and a model may have several.
   */
  stopWordsPerRequest?: boolean;
}

export interface RouterModel {
  name: string;
  model?: PreparedModel;
  /** Why it is not served (broken manifest, not a GGUF, …). */
  error?: BridgeError | StoreError | PrepareError;
}

export interface RouterServer extends RunningServer {
  models: RouterModel[];
  presetPath: string;
}

/** Flags that take no value, among those modelArgs emits. */
const FLAG_ONLY = new Set(["--embedding", "--no-mmap"]);
/** Flags llama-server accepts as one comma-separated value when repeated. */
const COMMA_JOINED = new Set(["--lora"]);

/**
 * What llama.cpp makes of a preset section name with a colon: it upper-cases the tag
 * (`gemma3:4b` becomes `gemma3:4B`) and keeps only its last `-`/`.` part (`x:8b-q4_K_M` becomes
 * `x:Q4_K_M`: common/preset.cpp), so two Ollama tags can end up under one name.
 */
export function llamaCanonicalName(name: string): string {
  const colon = name.lastIndexOf(":");
  if (colon < 0) return name;
  const tag = name.slice(colon + 1);
  const m = /[-.]([A-Za-z0-9_]+)$/.exec(tag);
  return `${name.slice(0, colon + 1)}${(m ? m[1]! : tag).toUpperCase()}`;
}

/**
 * The preset section name of an Ollama model: its name with every `:` as `@` (a character no
 * Ollama name has), which llama.cpp keeps as it is (see llamaCanonicalName); requests name the
 * model by its Ollama name, the section's alias.
 */
export function presetName(name: string): string {
  return name.replaceAll(":", "@");
}

/**
 * The preset section of one model: its modelArgs as INI keys (`--ctx-size 4096` → `ctx-size = 4096`),
 * under presetName(name) with the Ollama name as its alias.
 */
export function presetSection(name: string, model: PreparedModel, warn: (msg: string) => void = () => undefined): string {
  const args = modelArgs(model).filter((a, i, all) => !(a === "--alias" || all[i - 1] === "--alias"));
  const values = new Map<string, string[]>();
  for (let i = 0; i < args.length; i++) {
    const flag = args[i]!;
    const value = FLAG_ONLY.has(flag) ? "true" : args[++i]!;
    values.set(flag, [...(values.get(flag) ?? []), value]);
  }
  const lines = [`[${presetName(name)}]`, `alias = ${name}`];
  for (const [flag, vs] of values) {
    const key = flag.replace(/^-+/, "");
    if (vs.length > 1 && !COMMA_JOINED.has(flag)) warn(`${name}: a preset holds one ${flag}; keeping "${vs[0]}"`);
    const value = COMMA_JOINED.has(flag) ? vs.join(",") : vs[0]!;
    // INI values end at a comment character or a newline
    if (/[;#\r\n]/.test(value)) {
      warn(`${name}: ${flag} value ${JSON.stringify(value)} cannot be written in a preset; left out`);
      continue;
    }
    lines.push(`${key} = ${value}`);
  }
  return lines.join("\n");
}

/**
 * Serves many models from one endpoint: llama-server in router mode with a preset that has
 * each model under its Ollama name (`"model": "gemma3:4b"` in a request picks it), its
 * translated file, projector and arguments. Models that cannot be served are reported, not
 * fatal. A preparer that plans models on first use (ModelPreparer.ready: serve's mount, from
 * recorded facts) leaves it to the caller to wait for a model's ready() before the router loads it.
 *
 * The router needs no model to start, and its start takes as long as reading a store of ten
 * models: it is started at once on an empty preset while the store is read and the models are
 * prepared (translated into the cache, if that is where they go), and takes them with a re-read
 * of its preset (`GET /models?reload=1`, which adds every section to a router that has none).
 */
export async function startRouter(opts: StartRouterOptions): Promise<RouterServer> {
  const store = asStore(opts.store, opts.env ?? process.env);
  const warn = (m: string) => opts.onStatus?.(`warning: ${m}`);
  // a folder of this process's own: one a SIGKILLed router left behind goes with the next start
  const dir = await ownedTempDir("ollama-compat-router-");
  const presetPath = join(dir, "models.ini");
  const cleanUp = () => (opts.keepPreset ? Promise.resolve() : rm(dir, { recursive: true, force: true }).catch(() => undefined));
  // a new file in a new folder of ours, read only by the router started below: nothing needs
  // it after a crash, so no fsync (a loaded disk makes one cost tenths of a second at every start)
  await writeFile(presetPath, PRESET_HEAD, { flag: "wx" });
  // stopped already: no llama-server is started
  if (opts.signal?.aborted) {
    await cleanUp();
    throw stoppedBeforeStart();
  }
  const args = ["--models-preset", presetPath];
  if (opts.modelsMax !== undefined) args.push("--models-max", String(opts.modelsMax));
  const launching = launch(args, opts, "llama-server (router)");
  launching.catch(() => undefined);
  const stopLaunched = async () => {
    const server = await launching.catch(() => undefined);
    await server?.stop();
    await cleanUp();
  };
  // a router that fails to start ends the preparation (a translation into the cache stops where it is)
  const preparing = new AbortController();
  const prepareSignal = opts.signal !== undefined ? AbortSignal.any([opts.signal, preparing.signal]) : preparing.signal;
  let models: RouterModel[];
  try {
    // a signal while the store is read ends the start then, not once the listing is done: its
    // reads (on libuv's threads) are left to finish, and no model is prepared after the signal
    const prepared = prepareRouterModels({ ...opts, signal: prepareSignal });
    models = await untilAborted(Promise.race([prepared, launching.then(() => new Promise<never>(() => undefined))]), opts.signal);
  } catch (e) {
    preparing.abort();
    await stopLaunched();
    throw e;
  }
  for (const m of models) if (m.error) warn(`${m.name} is not served: ${m.error.message}`);
  const served = models.filter((m) => m.model);
  if (served.length === 0) {
    await stopLaunched();
    throw new BridgeError("UNKNOWN_MODEL", `no servable model in ${store.root}`, { store: store.root });
  }
  const sections = served.map((m) => presetSection(m.name, opts.stopWordsPerRequest ? withoutStopWords(m.model!) : m.model!, warn));
  // a mount still starting when it handed out its paths: the start is not ready before the mount is
  const settled = preparerFor(opts).settled?.() ?? Promise.resolve();
  settled.catch(() => undefined);
  let server: RunningServer;
  try {
    // whole or not at all: the router may be reading its preset at this moment
    const next = join(dir, "models.ini.next");
    await writeFile(next, [PRESET_HEAD, ...sections.map((s) => s + "\n")].join("\n"), { flag: "wx" });
    await rename(next, presetPath);
    server = await launching;
    const { status, body } = await server.get("/models?reload=1");
    if (status !== 200) throw new BridgeError("SERVER_START_FAILED", `llama-server (router) did not take its preset (HTTP ${status}): ${body.slice(0, 500)}`, { status, lastLines: server.lastLines() });
    await settled;
  } catch (e) {
    await stopLaunched();
    throw e;
  }
  // the folder is gone by the time the router's exit is reported: a caller that exits then leaves nothing behind
  const exited = server.exited.then(async (e) => {
    await cleanUp();
    return e;
  });
  return {
    ...server,
    exited,
    stop: async (graceMs) => {
      await server.stop(graceMs);
      return exited;
    },
    models,
    presetPath,
  };
}

/** The preset's first line, all a router has before its models are known. */
const PRESET_HEAD = "version = 1\n";

/**
 * The models a router serves, each made servable by the mount or the cache (preparerFor):
 * every installed one ("all"; a model that cannot be served is listed with its error) or the
 * references given (any failure is fatal). Models are prepared one after another.
 */
export async function prepareRouterModels(opts: Pick<StartRouterOptions, "models" | "store" | "env"> & LaunchOptions): Promise<RouterModel[]> {
  const store = asStore(opts.store, opts.env ?? process.env);
  const preparer = preparerFor(opts);
  const models: RouterModel[] = [];
  if (opts.models !== "all") {
    for (const ref of opts.models) {
      const resolved = await store.resolve(ref);
      models.push({ name: resolved.name, model: await preparer.prepare(resolved) });
    }
    return models;
  }
  // a mount that lists the store (ServeMount) starts its own first scan from this listing
  for (const e of await (preparer.list?.() ?? store.list())) {
    if (e.error) {
      models.push({ name: e.name, error: e.error });
      continue;
    }
    if (opts.signal?.aborted) throw stoppedBeforeStart();
    try {
      models.push({ name: e.name, model: await preparer.prepare(e.model!) });
    } catch (err) {
      if ((err instanceof BridgeError || err instanceof PrepareError) && err.code === "TRANSLATION_ABORTED") throw err;
      // a cache (or sidecar folder) that cannot be written fails every model that needs translating: the serve's error, not this model's
      if (err instanceof PrepareError && err.code === "CACHE_UNWRITABLE") throw err;
      const error = err instanceof BridgeError || err instanceof StoreError || err instanceof PrepareError ? err : new BridgeError("UNSUPPORTED_MODEL", `${e.name}: ${(err as Error).message}`, { cause: err });
      models.push({ name: e.name, error });
    }
  }
  return models;
}

function stoppedBeforeStart(): BridgeError {
  return new BridgeError("TRANSLATION_ABORTED", "stopped before llama-server started");
}

/** `work`'s result, or TRANSLATION_ABORTED as soon as `signal` is aborted (`work` is left to end on its own). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(stoppedBeforeStart());
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      work.catch(() => undefined);
      reject(stoppedBeforeStart());
    };
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** The model with no stop words in its defaults (the Ollama API passes them per request). */
export function withoutStopWords(m: PreparedModel): PreparedModel {
  const { stop: _stop, ...params } = m.resolved.params;
  return { ...m, resolved: { ...m.resolved, params } };
}
