import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { modelArgs } from "./args";
import { BridgeError } from "./errors";
import { prepareModel, type PreparedModel } from "./prepare";
import { asStore, launch, type LaunchOptions, type RunningServer } from "./server";

export interface StartRouterOptions extends LaunchOptions {
  /** "all": every installed model; or a list of references. */
  models: "all" | readonly string[];
  /** Models loaded at once (llama-server --models-max). Default llama-server's (4). */
  modelsMax?: number;
  /** Keep the generated preset file after stop (for debugging). */
  keepPreset?: boolean;
}

export interface RouterModel {
  name: string;
  model?: PreparedModel;
  /** Why it is not served (broken manifest, not a GGUF, …). */
  error?: BridgeError;
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
 * llama.cpp upper-cases the tag of a preset section name (`gemma3:4b` becomes `gemma3:4B`,
 * and `x:8b-q4_K_M` becomes `x:Q4_K_M`: common/preset.cpp); requests must then use that
 * form, so the Ollama name is also given as an alias when the two differ.
 */
export function llamaCanonicalName(name: string): string {
  const colon = name.lastIndexOf(":");
  if (colon < 0) return name;
  const tag = name.slice(colon + 1);
  const m = /[-.]([A-Za-z0-9_]+)$/.exec(tag);
  return `${name.slice(0, colon + 1)}${(m ? m[1]! : tag).toUpperCase()}`;
}

/** The preset section of one model: its modelArgs as INI keys (`--ctx-size 4096` → `ctx-size = 4096`). */
export function presetSection(name: string, model: PreparedModel, warn: (msg: string) => void = () => undefined): string {
  const args = modelArgs(model).filter((a, i, all) => !(a === "--alias" || all[i - 1] === "--alias"));
  const values = new Map<string, string[]>();
  for (let i = 0; i < args.length; i++) {
    const flag = args[i]!;
    const value = FLAG_ONLY.has(flag) ? "true" : args[++i]!;
    values.set(flag, [...(values.get(flag) ?? []), value]);
  }
  const lines = [`[${name}]`];
  const canonical = llamaCanonicalName(name);
  if (canonical !== name) lines.push(`alias = ${name}`);
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
 * translated file, projector and arguments. Models are translated before the router starts
 * (cache hits are instant); models that cannot be served are reported, not fatal.
 */
export async function startRouter(opts: StartRouterOptions): Promise<RouterServer> {
  const env = opts.env ?? process.env;
  const store = asStore(opts.store, env);
  const warn = (m: string) => opts.onStatus?.(`warning: ${m}`);
  const models: RouterModel[] = [];
  if (opts.models === "all") {
    for (const e of await store.list()) {
      if (e.error) models.push({ name: e.name, error: e.error });
      else models.push(await prepareOrReport(e.name, e.model!));
    }
  } else {
    for (const ref of opts.models) {
      const resolved = await store.resolve(ref);
      models.push({ name: resolved.name, model: await prepareModel(resolved, opts) });
    }
  }
  for (const m of models) if (m.error) warn(`${m.name} is not served: ${m.error.message}`);
  const served = models.filter((m) => m.model);
  if (served.length === 0) throw new BridgeError("UNKNOWN_MODEL", `no servable model in ${store.root}`, { store: store.root });

  const sections = served.map((m) => presetSection(m.name, m.model!, warn));
  const dir = await mkdtemp(join(tmpdir(), "ollama-compat-router-"));
  const presetPath = join(dir, "models.ini");
  await writeFile(presetPath, ["version = 1", "", ...sections.map((s) => s + "\n")].join("\n"));
  const args = ["--models-preset", presetPath];
  if (opts.modelsMax !== undefined) args.push("--models-max", String(opts.modelsMax));
  let server: RunningServer;
  try {
    server = await launch(args, opts, "llama-server (router)");
  } catch (e) {
    if (!opts.keepPreset) await rm(dir, { recursive: true, force: true });
    throw e;
  }
  const cleanup = () => (opts.keepPreset ? undefined : rm(dir, { recursive: true, force: true }));
  void server.exited.then(cleanup);
  return { ...server, models, presetPath };

  async function prepareOrReport(name: string, resolved: Parameters<typeof prepareModel>[0]): Promise<RouterModel> {
    try {
      return { name, model: await prepareModel(resolved, opts) };
    } catch (e) {
      if (e instanceof BridgeError && e.code === "TRANSLATION_ABORTED") throw e;
      const error = e instanceof BridgeError ? e : new BridgeError("UNSUPPORTED_MODEL", `${name}: ${(e as Error).message}`, { cause: e });
      return { name, error };
    }
  }
}
