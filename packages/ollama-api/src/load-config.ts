import { readFile } from "node:fs/promises";
import { writeFileAtomic } from "@compat/files";
import type { PreparedModel } from "@compat/prepare";
import { DEFAULT_NUM_CTX, presetSection } from "@compat/server-bridge";
import { ApiError, badRequest, upstreamMessage } from "./errors";
import type { ApiModel } from "./models";
import type { Upstream } from "./upstream";

/**
 * One way a model can be loaded: the params layer's (what the router's preset has from the
 * start), or that with a request's load-time options (a "variant", added to the preset when a
 * request first asks for it). At most one configuration of a model is loaded at a time.
 */
export interface LoadConfig {
  /** The name the router knows it by: the Ollama name for the params layer's, `name~ctx8192` for a variant. */
  routerName: string;
  /** Its context size (what /api/ps reports as context_length). */
  numCtx: number;
}

/** What a request needs loaded. */
export interface LoadWant {
  config: LoadConfig;
  /**
   * The request named no load-time option: whatever configuration of the model is loaded serves
   * it, as long as its context is at least the params layer's (so Continue's num_ctx 8192 and a
   * client that sends none share one runner instead of reloading it on every turn).
   */
  flexible: boolean;
}

type Kind = "int" | "bool";

/**
 * Ollama's load-time options (api.Runner) as the router's preset takes them, through the
 * params-layer keys that modelArgs maps (num_ctx → --ctx-size, num_batch → --batch-size and
 * --ubatch-size, num_gpu → --n-gpu-layers, num_thread → --threads, use_mmap false → --no-mmap)
 * and main_gpu → --main-gpu, which modelArgs leaves out. Ollama reloads a model whose loaded
 * options differ from a request's (server/sched.go needsReload). draft_num_predict is not one
 * here: the bridge loads no draft model.
 */
const LOAD_OPTIONS: ReadonlyArray<readonly [option: string, kind: Kind, tag: string]> = [
  ["num_ctx", "int", "ctx"],
  ["num_batch", "int", "batch"],
  ["num_gpu", "int", "gpu"],
  ["main_gpu", "int", "maingpu"],
  ["use_mmap", "bool", "mmap"],
  ["num_thread", "int", "threads"],
];

/** api.DefaultOptions' Runner part: an option a request sets to its default changes nothing. */
const RUNNER_DEFAULTS: Readonly<Record<string, number | boolean | undefined>> = { num_ctx: DEFAULT_NUM_CTX, num_batch: 512, num_gpu: -1, main_gpu: 0, num_thread: 0, use_mmap: undefined };

/** Options whose default means "the runner decides": no flag at all. */
const AUTO: ReadonlySet<string> = new Set(["num_gpu", "num_thread", "use_mmap"]);

/** The configurations the router may be asked for beyond the params layer's, before the least recently used unloaded one is dropped from the preset. */
const MAX_VARIANTS = 32;

interface Variant {
  config: LoadConfig;
  /** The Ollama name of the model it is a configuration of. */
  model: string;
  /** Its preset section for a model's files (built again when the files behind the name change). */
  build(m: PreparedModel): string;
  section: string;
  lastUsed: number;
}

/** New files for a served name, not yet in the preset (see LoadConfigs.addModel). */
interface Replacement {
  section: string;
  prepared: PreparedModel;
}

/**
 * The load configurations of the served models: which one a request needs, and the router's
 * preset sections for those that are not the params layer's. llama-server's router takes no
 * per-load arguments, but it re-reads its preset on `GET /models?reload=1`, adding new sections
 * and leaving running models whose section did not change alone (server-models.cpp
 * load_models); a variant is a section of its own, written when first needed.
 *
 * The same re-read stops a running instance whose section changed, in the middle of whatever it
 * answers. So the files behind a served name change in the preset only when no instance of that
 * name runs: a replacement waits in `replacements` until the scheduler loads the name again
 * (define), which it does only once the old instance is gone (ModelScheduler.retire).
 */
export class LoadConfigs {
  private readonly variants = new Map<string, Variant>();
  /** Variants the router has taken from the preset. */
  private known = new Set<string>();
  /** The preset as the router started with it, with the models added since; variants are appended to it. */
  private basePreset?: Promise<string>;
  /** Served names whose files changed, by Ollama name: their new section, written at their next load. */
  private readonly replacements = new Map<string, Replacement>();
  /** Preset rewrites run one after another. */
  private writing: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly presetPath: string,
    private readonly upstream: Upstream,
  ) {}

  /**
   * The configuration a request with `requestOptions` needs (a 400 for an option of the wrong
   * type). `embed`: the request embeds with a model that is not an embedding model, which
   * llama-server does only in a configuration of its own (`--embedding`, which refuses
   * completions, with the last token's state as the input's: `--pooling last`).
   */
  want(m: ApiModel, requestOptions: unknown, trainCtx: number, embed = false): LoadWant {
    const params = m.prepared.resolved.params;
    const base = effective(params, undefined, trainCtx);
    const asked = requestOptions && typeof requestOptions === "object" && !Array.isArray(requestOptions) ? (requestOptions as Record<string, unknown>) : {};
    const wanted = effective(params, asked, trainCtx);
    const differs = LOAD_OPTIONS.filter(([o]) => wanted[o] !== base[o]);
    const defaultConfig: LoadConfig = { routerName: m.name, numCtx: base.num_ctx as number };
    const flexible = !LOAD_OPTIONS.some(([o]) => asked[o] !== undefined && asked[o] !== null);
    const asEmbedder = embed && !m.prepared.embedding;
    if (differs.length === 0 && !asEmbedder) return { config: defaultConfig, flexible };
    const tags = differs.map(([o, kind, tag]) => `${tag}${kind === "bool" ? Number(wanted[o]) : wanted[o]}`);
    const routerName = `${m.name}~${[...tags, ...(asEmbedder ? ["embed"] : [])].join("-")}`;
    let v = this.variants.get(routerName);
    if (!v) {
      const overrides: Record<string, unknown> = {};
      for (const [o] of differs) overrides[o] = wanted[o];
      const build = (p: PreparedModel) => (asEmbedder ? `${variantSection(routerName, { ...p, embedding: true }, overrides)}\npooling = last` : variantSection(routerName, p, overrides));
      v = { config: { routerName, numCtx: wanted.num_ctx as number }, model: m.name, build, section: build(m.prepared), lastUsed: 0 };
      this.variants.set(routerName, v);
    }
    v.lastUsed = performance.now();
    return { config: v.config, flexible: false };
  }

  /**
   * Makes sure the router knows `config` (its preset section written and re-read), just before
   * it is loaded: the scheduler calls this only when no instance of its model runs, so this is
   * when a replacement of the model's files goes into the preset. `inUse` says which router
   * names must stay (loaded or claimed), when old variants are dropped to keep the preset bounded.
   */
  define(config: LoadConfig, inUse: ReadonlySet<string>): Promise<void> {
    const v = this.variants.get(config.routerName);
    const model = v?.model ?? config.routerName;
    // the params layer's, unchanged: in the preset from the start
    if (!v && !this.replacements.has(model)) return Promise.resolve();
    const job = async () => {
      const replaced = await this.replace(model);
      if (!replaced && (!v || this.known.has(config.routerName))) return;
      const stale = [...this.variants.entries()].filter(([n]) => n !== config.routerName && !inUse.has(n)).sort(([, a], [, b]) => a.lastUsed - b.lastUsed);
      while (this.variants.size > MAX_VARIANTS && stale.length > 0) {
        const [name] = stale.shift()!;
        this.variants.delete(name);
        this.known.delete(name);
      }
      const listed = await this.rewrite(config.routerName);
      this.known = new Set([...this.variants.keys()].filter((n) => listed.has(n)));
      if (!listed.has(config.routerName)) throw new ApiError(500, `llama-server did not take the preset section of ${config.routerName}`);
    };
    return this.serially(job);
  }

  /**
   * Serves `name` from `prepared`, whose preset section is `section`. A name the preset has no
   * section for is written and re-read at once. A name it has (a create, copy or pull over a
   * served model, or one deleted while its instance still answered) may have an instance running
   * the old files: the new section waits for the name's next load (see define), when none does.
   */
  addModel(name: string, section: string, prepared: PreparedModel): Promise<void> {
    return this.serially(async () => {
      const base = await (this.basePreset ??= readFile(this.presetPath, "utf8"));
      const at = sectionAt(base, section);
      if (at) {
        this.replacements.set(name, { section, prepared });
        // the files the preset has already (replaced, then put back before they were loaded)
        if (base.slice(at.start, at.end).trimEnd() === section) await this.replace(name);
        return;
      }
      this.basePreset = Promise.resolve(`${base.trimEnd()}\n\n${section}\n`);
      const listed = await this.rewrite(name);
      if (!listed.has(name)) throw new ApiError(500, `llama-server did not take the preset section of ${name}`);
    });
  }

  /** Puts the waiting replacement of `name` (if any) in the base preset, its variants built again from the new files; whether there was one. */
  private async replace(name: string): Promise<boolean> {
    const r = this.replacements.get(name);
    if (!r) return false;
    this.replacements.delete(name);
    const base = await (this.basePreset ??= readFile(this.presetPath, "utf8"));
    const at = sectionAt(base, r.section)!;
    this.basePreset = Promise.resolve(`${base.slice(0, at.start)}${r.section}\n${at.end < base.length ? "\n" : ""}${base.slice(at.end)}`);
    for (const v of this.variants.values()) if (v.model === name) v.section = v.build(r.prepared);
    return true;
  }

  private serially(job: () => Promise<void>): Promise<void> {
    const run = this.writing.then(job, job);
    this.writing = run.catch(() => undefined);
    return run;
  }

  /** Writes the preset (the base, then the variants), has the router re-read it; the names it lists. */
  private async rewrite(forName: string): Promise<Set<string>> {
    this.basePreset ??= readFile(this.presetPath, "utf8");
    const text = [await this.basePreset, ...[...this.variants.values()].map((x) => x.section + "\n")].join("\n");
    // llama-server re-reads the preset on the reload: it sees the old one or the new one, never half
    await writeFileAtomic(this.presetPath, text);
    const { status, text: body } = await this.upstream.call("GET", "/models?reload=1");
    if (status !== 200) throw new ApiError(500, `llama-server could not re-read its preset for ${forName}: ${upstreamMessage(body)}`);
    const listed = new Set<string>();
    for (const m of (JSON.parse(body) as { data?: Array<{ id: string; aliases?: string[] }> }).data ?? []) for (const n of [m.id, ...(m.aliases ?? [])]) listed.add(n);
    return listed;
  }
}

/** Where the preset `text` holds the section whose header `section` starts with: from its header to the next one (or the end). */
function sectionAt(text: string, section: string): { start: number; end: number } | undefined {
  const header = section.slice(0, section.indexOf("\n") + 1);
  const start = text.startsWith(header) ? 0 : text.indexOf(`\n${header}`) + 1;
  if (start === 0 && !text.startsWith(header)) return undefined;
  const next = text.indexOf("\n[", start + header.length);
  return { start, end: next < 0 ? text.length : next + 1 };
}

/**
 * A model's load-time options: Ollama's defaults, then the params layer, then the request.
 * num_ctx is held to [4, the model's training context] as Ollama's scheduler holds it; a value
 * of the wrong type is a 400, as in Ollama's Options.FromMap.
 */
function effective(params: Record<string, unknown>, request: Record<string, unknown> | undefined, trainCtx: number): Record<string, number | boolean | undefined> {
  const out: Record<string, number | boolean | undefined> = {};
  for (const [o, kind] of LOAD_OPTIONS) {
    const fromRequest = request?.[o];
    const v = fromRequest !== undefined && fromRequest !== null ? fromRequest : params[o];
    if (v === undefined || v === null) {
      out[o] = RUNNER_DEFAULTS[o];
      continue;
    }
    if (kind === "bool" ? typeof v !== "boolean" : typeof v !== "number" || !Number.isFinite(v)) {
      throw badRequest(`option "${o}" must be of type ${kind === "bool" ? "boolean" : "integer"}`);
    }
    out[o] = kind === "int" ? Math.trunc(v as number) : v as boolean;
  }
  let ctx = out.num_ctx as number;
  if (trainCtx > 0 && ctx > trainCtx) ctx = trainCtx;
  out.num_ctx = Math.max(4, ctx);
  if ((out.num_gpu as number) < 0) out.num_gpu = -1; // any negative: let llama-server decide
  return out;
}

/** The preset section of a variant: the model's own arguments with the load-time options changed. */
function variantSection(routerName: string, m: PreparedModel, overrides: Record<string, unknown>): string {
  const { stop: _stop, ...params } = m.resolved.params;
  const { main_gpu: mainGpu, ...rest } = overrides;
  for (const [k, v] of Object.entries(rest)) {
    // Ollama's "let the runner decide" (num_gpu -1, num_thread 0, use_mmap unset) leaves the flag out
    if (AUTO.has(k) && v === RUNNER_DEFAULTS[k]) delete params[k];
    else params[k] = v;
  }
  const section = presetSection(routerName, { ...m, resolved: { ...m.resolved, params } });
  return mainGpu === undefined ? section : `${section}\nmain-gpu = ${String(mainGpu)}`;
}
