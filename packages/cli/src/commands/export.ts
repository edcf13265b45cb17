import { constants } from "node:fs";
import { copyFile, lstat, mkdir, rename, rm, stat, symlink } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import type { TranslationProfile } from "@compat/handlers";
import { modelFiles, ModelStore, prepareModel, TranslationCache, type ModelsLayout, type PreparedModel } from "@compat/server-bridge";
import { CliError } from "../errors";
import { ExitCode, type CliIo } from "../io";
import { progressBar } from "../progress";

export interface ExportFlags {
  to: string;
  layout?: ModelsLayout;
  copy?: boolean;
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

/** Puts `source` at `target`: a symlink, or for --copy a reflink-when-possible copy (written beside, then renamed). */
async function place(source: string, target: string, copy: boolean): Promise<"symlink" | "copy"> {
  await mkdir(resolve(target, ".."), { recursive: true });
  const existing = await lstat(target).catch(() => undefined);
  if (existing?.isDirectory()) throw new CliError("error", `${target}: is a directory; expected a GGUF file or link`);
  if (copy) {
    const tmp = join(resolve(target, ".."), `.${basename(target)}.partial`);
    await copyFile(source, tmp, constants.COPYFILE_FICLONE);
    await rename(tmp, target);
    return "copy";
  }
  if (existing) await rm(target);
  await symlink(resolve(source), target);
  return "symlink";
}

export async function exportCommand(refs: string[], opts: ExportFlags, io: CliIo): Promise<number> {
  if (opts.to.trim() === "") throw new CliError("usage", "--to: empty path; expected a folder");
  const st = await stat(opts.to).catch(() => undefined);
  if (st && !st.isDirectory()) throw new CliError("usage", `--to ${opts.to}: exists and is not a folder`);
  const layout = opts.layout ?? "models-dir";
  const store = new ModelStore(opts.models, io.env);
  const cache = new TranslationCache({ env: io.env, ...(opts.cacheDir ? { dir: opts.cacheDir } : {}), ...(opts.profile ? { profile: opts.profile } : {}) });
  let names = refs;
  if (names.length === 0) {
    names = (await store.list()).filter((e) => !e.error).map((e) => e.name);
    if (names.length === 0) throw new CliError("error", `no models in ${store.root} to export`);
  }
  await mkdir(opts.to, { recursive: true });
  const done: ExportedModel[] = [];
  let failed = 0;
  for (const name of names) {
    let prepared: PreparedModel;
    const bar = progressBar(io, `${name}`, { quiet: opts.quiet || opts.json });
    try {
      const resolved = await store.resolve(name);
      prepared = await prepareModel(resolved, { cache, env: io.env, onProgress: (e) => bar.update(e.written, e.total) });
    } catch (e) {
      bar.done();
      failed++;
      const message = e instanceof Error ? e.message.split("\n")[0]! : String(e);
      done.push({ name, model: { path: "", source: "", how: "symlink" }, translated: false, error: message });
      if (!opts.json) io.err(`ollama-compat: ${name}: ${message}\n`);
      continue;
    }
    bar.done();
    const files = modelFiles(prepared.resolved.name, layout, prepared.mmproj !== undefined);
    const paths = { model: join(opts.to, files.model), mmproj: join(opts.to, files.mmproj) };
    // native blobs are the user's Ollama store: linked, never copied
    const entry: ExportedModel = {
      name: prepared.resolved.name,
      model: { path: paths.model, source: prepared.modelPath, how: await place(prepared.modelPath, paths.model, !!opts.copy && prepared.translated) },
      translated: prepared.translated,
    };
    if (prepared.mmproj !== undefined) {
      // a separate projector blob (old LLaVA) that needed nothing is linked too
      const mmprojTranslated = !prepared.resolved.projectors.includes(prepared.mmproj);
      entry.mmproj = { path: paths.mmproj, source: prepared.mmproj, how: await place(prepared.mmproj, paths.mmproj, !!opts.copy && mmprojTranslated) };
    }
    done.push(entry);
    if (!opts.json) {
      io.out(`${entry.name} -> ${entry.model.path} (${entry.model.how}${entry.translated ? ", translated" : ", native"})\n`);
      if (entry.mmproj) io.out(`${entry.name} -> ${entry.mmproj.path} (${entry.mmproj.how}, projector)\n`);
    }
  }
  if (opts.json) io.out(JSON.stringify({ to: opts.to, layout, models: done }, null, 2) + "\n");
  else if (layout === "models-dir") io.out(`serve them with: llama-server --models-dir ${opts.to}\n`);
  if (opts.copy !== true && !opts.json && done.some((d) => d.translated)) {
    io.err(`ollama-compat: translated files are links into the cache (${cache.dir}); pass --copy for files that outlive it\n`);
  }
  if (!opts.json && done.some((d) => d.translated)) {
    // a mount shows the same folder with no translated copy at all (it works while it runs)
    io.err(`ollama-compat: to use no disk for translated files, mount the store instead: ollama-compat mount DIR${layout === "lmstudio" ? " --layout lmstudio" : ""}\n`);
  }
  return failed > 0 ? ExitCode.error : ExitCode.ok;
}
