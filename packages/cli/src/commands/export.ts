import { lstat, mkdir, stat } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { writeFileAtomic } from "@compat/files";
import type { TranslationProfile } from "@compat/handlers";
import { modelFiles, prepareModel, type PreparedModel } from "@compat/prepare";
import { findLlamaTool, modelArgs, presetSection } from "@compat/server-bridge";
import { ModelStore } from "@compat/store";
import { CliError } from "../errors";
import { terminalSafe } from "../terminal";
import { ExitCode, type CliIo } from "../io";
import { cacheProgress, progressBar } from "../progress";
import { bridgeEnv, commandCache } from "./cache-dir";
import { LLAMA_SWAP_FILE, llamaSwapFile, PRESET_FILE, presetFile, shellWord } from "./export-configs";
import { checkReplaceable, makeFolders, placeCopy, placeLink, readRecord, relativeTo, sweepLeftovers, writeRecord, type ExportRecord } from "./export-files";

/** Where the files go (a llama-swap folder is laid out as a models-dir one) and which configuration is written beside them. */
export type ExportLayout = "models-dir" | "llama-swap" | "lmstudio";

export interface ExportFlags {
  to: string;
  layout?: ExportLayout;
  copy?: boolean;
  force?: boolean;
  llamaServer?: string;
  models?: string;
  cacheDir?: string;
  json?: boolean;
  quiet?: boolean;
  profile?: TranslationProfile;
}

export interface ExportedModel {
  name: string;
  /** The text GGUF in the export folder, and what it links to (or was copied from). */
  model: { path: string; source: string; how: "symlink" | "copy" };
  mmproj?: { path: string; source: string; how: "symlink" | "copy" };
  translated: boolean;
  error?: string;
}

/** The configuration file each layout writes beside the models (LM Studio reads the folder itself). */
const CONFIG_FILE: Partial<Record<ExportLayout, string>> = { "models-dir": PRESET_FILE, "llama-swap": LLAMA_SWAP_FILE };

/** Where a model's files go under `root`: the bridge's modelFiles, the one answer `mount` gives too. */
export function exportPaths(root: string, name: string, layout: ExportLayout, multimodal: boolean): { model: string; mmproj: string } {
  const files = modelFiles(name, layout === "lmstudio" ? "lmstudio" : "models-dir", multimodal);
  return { model: join(root, files.model), mmproj: join(root, files.mmproj) };
}

/**
 * `export [MODEL...] --to DIR`: lays the models out for a llama.cpp front end, with the
 * configuration that makes it serve each one as `serve` does. Writes only what it made
 * before (or anything with --force), never through a link. Returns the exit code.
 */
export async function exportCommand(refs: string[], opts: ExportFlags, io: CliIo): Promise<number> {
  if (opts.to.trim() === "") throw new CliError("usage", "--to: empty path; expected a folder");
  const st = await stat(opts.to).catch(() => undefined);
  if (st && !st.isDirectory()) throw new CliError("usage", `--to ${opts.to}: exists and is not a folder`);
  const layout = opts.layout ?? "models-dir";
  const force = opts.force === true;
  const root = resolve(opts.to);
  const env = bridgeEnv(io.env, opts.cacheDir);
  const store = new ModelStore(opts.models, io.env);
  const cache = commandCache(env, opts.profile);
  const warnings: string[] = [];
  const warn = (m: string) => {
    warnings.push(m);
    if (!opts.json) io.err(`ollama-compat: warning: ${terminalSafe(m)}\n`);
  };

  try {
    await mkdir(root, { recursive: true });
  } catch (e) {
    throw new CliError("error", `--to ${opts.to}: cannot make the folder: ${why(e)}`);
  }
  const record = await readRecord(root, force);
  // the configuration is checked first: refusing it after an hour of copies would help nobody
  const configName = CONFIG_FILE[layout];
  const config = configName === undefined ? undefined : join(root, configName);
  if (config !== undefined) await checkReplaceable(root, config, record, force);
  await sweepLeftovers([root, ...Object.keys(record.files).map((f) => dirname(join(root, f)))]);

  let names = refs;
  if (names.length === 0) {
    names = (await store.list()).filter((e) => !e.error).map((e) => e.name);
    if (names.length === 0) throw new CliError("error", `no models in ${store.root} to export`);
  }
  const done: ExportedModel[] = [];
  const now = new Set<string>();
  for (const ref of [...new Set(names)]) {
    try {
      const entry = await exportOne(ref);
      done.push(entry);
      now.add(entry.name);
      if (!opts.json) {
        io.out(`${entry.name} -> ${entry.model.path} (${entry.model.how}${entry.translated ? ", translated" : ", native"})\n`);
        if (entry.mmproj) io.out(`${entry.name} -> ${entry.mmproj.path} (${entry.mmproj.how}, projector)\n`);
      }
    } catch (e) {
      const message = e instanceof Error ? e.message.split("\n")[0]! : String(e);
      done.push({ name: ref, model: { path: "", source: "", how: "symlink" }, translated: false, error: message });
      if (!opts.json) io.err(`ollama-compat: ${terminalSafe(`${ref}: ${message}`)}\n`);
    }
  }

  const exported = done.filter((d) => !d.error);
  const command = await writeFolderConfig(root, opts.to, layout, record, exported.length > 0, () => opts.llamaServer ?? llamaServerFor(env), (name, m) => {
    // warnings about models exported before were given then
    if (now.has(name)) warn(m);
  });

  if (opts.json) {
    io.out(JSON.stringify({ to: opts.to, layout, models: done, ...(config && command ? { config } : {}), ...(command ? { command } : {}), warnings }, null, 2) + "\n");
  } else {
    // nothing to serve when every model failed
    if (command) io.out(`serve them with: ${command}\n`);
    if (opts.copy !== true && exported.some((d) => d.translated)) {
      io.err(`ollama-compat: translated files are links into the cache (${terminalSafe(cache.dir)}); pass --copy for files that outlive it\n`);
    }
    if (exported.some((d) => d.translated)) {
      // a mount shows the same folder with no translated copy at all (it works while it runs)
      io.err(`ollama-compat: to use no disk for translated files, mount the store instead: ollama-compat mount DIR${layout === "lmstudio" ? " --layout lmstudio" : ""}\n`);
    }
  }
  return done.some((d) => d.error) ? ExitCode.error : ExitCode.ok;

  async function exportOne(ref: string): Promise<ExportedModel> {
    const progress = cacheProgress(io, { quiet: opts.quiet || opts.json });
    const resolved = await store.resolve(ref);
    const prepared = await prepareModel(resolved, { cache, env, onProgress: progress });
    const name = prepared.resolved.name;
    const paths = exportPaths(root, name, layout, prepared.mmproj !== undefined);
    // native blobs are the user's Ollama store: linked, never copied; so is a separate
    // projector blob (old LLaVA) that needed nothing
    const copyModel = opts.copy === true && prepared.translated;
    const copyMmproj = opts.copy === true && prepared.mmproj !== undefined && !prepared.resolved.projectors.includes(prepared.mmproj);
    const targets = prepared.mmproj === undefined ? [paths.model] : [paths.model, paths.mmproj];
    for (const t of targets) {
      await makeFolders(root, dirname(t), force);
      await checkReplaceable(root, t, record, force);
    }
    const served: PreparedModel = { ...prepared, modelPath: paths.model, ...(prepared.mmproj !== undefined ? { mmproj: paths.mmproj } : {}) };
    const args = [...modelArgs(served), "--alias", name];
    // recorded before anything is placed: an export stopped midway leaves files that are known to be its own
    record.files[relativeTo(root, paths.model)] = copyModel ? "copy" : "symlink";
    if (prepared.mmproj !== undefined) record.files[relativeTo(root, paths.mmproj)] = copyMmproj ? "copy" : "symlink";
    delete record.models[name];
    await writeRecord(root, record);
    // shown under the folder as the user named it; the configurations hold absolute paths
    const shown = (p: string) => join(opts.to, relativeTo(root, p));
    const entry: ExportedModel = { name, model: { path: shown(paths.model), source: prepared.modelPath, how: await place(prepared.modelPath, paths.model, copyModel, name) }, translated: prepared.translated };
    if (prepared.mmproj !== undefined) entry.mmproj = { path: shown(paths.mmproj), source: prepared.mmproj, how: await place(prepared.mmproj, paths.mmproj, copyMmproj, `projector of ${name}`) };
    const presetWarnings: string[] = [];
    record.models[name] = {
      layout,
      files: targets.map((t) => relativeTo(root, t)),
      preset: presetSection(name, served, (m) => presetWarnings.push(m)),
      args,
    };
    if (layout === "models-dir") for (const m of presetWarnings) warn(/--reverse-prompt/.test(m) ? `${m} (--layout llama-swap keeps every stop word)` : m);
    await writeRecord(root, record);
    return entry;
  }

  async function place(source: string, target: string, copy: boolean, what: string): Promise<"symlink" | "copy"> {
    if (!copy) {
      await placeLink(source, target);
      return "symlink";
    }
    const bar = progressBar(io, `copying ${what}`, { quiet: opts.quiet || opts.json });
    try {
      await placeCopy(source, target, (w, t) => bar.update(w, t));
    } finally {
      bar.done();
    }
    return "copy";
  }
}

/**
 * Writes the record (keeping only models whose files are still there) and, when `any` model was
 * placed now, the layout's configuration listing every recorded model (models.ini or
 * llama-swap.yaml; nothing for lmstudio). Returns the command that serves the folder.
 */
export async function writeFolderConfig(
  root: string,
  to: string,
  layout: ExportLayout,
  record: ExportRecord,
  any: boolean,
  llamaServer: () => string,
  warn: (name: string, msg: string) => void,
): Promise<string | undefined> {
  for (const [name, m] of Object.entries(record.models)) {
    if (!(await lstat(join(root, m.files[0]!)).catch(() => undefined))) delete record.models[name];
  }
  await writeRecord(root, record);
  const configName = CONFIG_FILE[layout];
  if (configName === undefined || !any) return undefined;
  const config = join(root, configName);
  record.files[relativeTo(root, config)] = "file";
  await writeRecord(root, record);
  if (layout === "models-dir") {
    await writeFileAtomic(config, presetFile(record));
    return `llama-server --models-preset ${shellWord(join(to, PRESET_FILE))}`;
  }
  await writeFileAtomic(config, llamaSwapFile(record, llamaServer(), warn));
  return `llama-swap --config ${shellWord(join(to, LLAMA_SWAP_FILE))}`;
}

/** The configuration file each layout writes beside the models, if any. */
export function configFileOf(layout: ExportLayout): string | undefined {
  return CONFIG_FILE[layout];
}

/** An errno in words (the message of a failed mkdir is "ENOTDIR: not a directory, mkdir '…'"). */
function why(e: unknown): string {
  const code = (e as NodeJS.ErrnoException).code;
  const words: Record<string, string> = {
    ENOTDIR: "a part of the path is a file, not a folder",
    EACCES: "permission denied",
    EPERM: "not permitted",
    EROFS: "the file system is read-only",
    ENOSPC: "no space left on the device",
    ELOOP: "too many links in the path",
  };
  return (code && words[code]) ?? (e as Error).message;
}

/** The llama-server llama-swap is to run: the one `serve` would (LLAMA_SERVER, PATH, the tools build cache), else plain `llama-server` from llama-swap's PATH. */
export function llamaServerFor(env: Record<string, string | undefined>): string {
  try {
    return findLlamaTool("llama-server", { env });
  } catch {
    return "llama-server";
  }
}
