import { statSync } from "node:fs";
import { stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { formatReport, type TranslatedView, type TranslationProfile } from "@compat/handlers";
import { openViews } from "@compat/views";
import { CliError } from "../errors";
import { groupThousands } from "../format";
import type { CliIo } from "../io";
import { progressBar } from "../progress";
import { resolveInput } from "./resolve";

export interface TranslateFlags {
  output?: string;
  mmproj?: string;
  dryRun?: boolean;
  json?: boolean;
  profile?: TranslationProfile;
  quiet?: boolean;
}

/** An output path must name a file in an existing folder: checked before any work. */
export function checkOutputPath(flag: string, path: string | undefined): void {
  if (path === undefined) return;
  if (path.trim() === "") throw new CliError("usage", `${flag}: empty path; expected a .gguf file name`);
  let st;
  try {
    st = statSync(path);
  } catch {
    st = undefined;
  }
  if (st?.isDirectory()) throw new CliError("usage", `${flag} ${path}: is a directory; expected a .gguf file name (e.g. ${join(path, "model.gguf")})`);
  let parent;
  try {
    parent = statSync(dirname(resolve(path)));
  } catch {
    parent = undefined;
  }
  if (!parent?.isDirectory()) throw new CliError("usage", `${flag} ${path}: the folder ${dirname(resolve(path))} does not exist`);
}

/**
 * Where the projector goes when --mmproj is not given: `mmproj-<name of OUT>` beside it,
 * the prefix llama.cpp's tools (llama-server's --models-dir, LM Studio) look for.
 */
export function defaultMmprojPath(output: string): string {
  return join(dirname(output), `mmproj-${basename(output)}`);
}

export async function translateCommand(file: string, opts: TranslateFlags, io: CliIo): Promise<void> {
  if (!opts.dryRun && opts.output === undefined) throw new CliError("usage", "translate needs -o OUT.gguf (or --dry-run)");
  checkOutputPath("-o", opts.output);
  checkOutputPath("--mmproj", opts.mmproj);
  for (const [flag, path] of [["-o", opts.output], ["--mmproj", opts.mmproj]] as const) {
    if (path !== undefined && (resolve(path) === resolve(file) || (await sameFile(path, file)))) {
      throw new CliError("usage", `${flag}: the output must not be the input: the source file is never modified`);
    }
  }
  if (opts.output !== undefined && opts.mmproj !== undefined && resolve(opts.output) === resolve(opts.mmproj)) {
    throw new CliError("usage", "-o and --mmproj must be different files");
  }
  const views = await openViews(await resolveInput(file, io), { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
  try {
    const text = views.text;
    const clip = views.mmproj?.kind === "view" ? views.mmproj.view : null;
    if (views.status === "not-supported") {
      throw new CliError(
        "not-supported",
        `${file}: Ollama-format (${views.ollamaWriter!.join("; ")}) but neither a handler of this version nor llama.cpp knows architecture "${views.architecture}"; nothing written`,
      );
    }
    if (text === null && clip === null) {
      if (opts.json) io.out(JSON.stringify({ file, translated: false, profile: opts.profile ?? "native", mmproj: null }, null, 2) + "\n");
      else io.out(`${file}: nothing to do, no output written\n`);
      if (opts.mmproj !== undefined) io.err(`ollama-compat: ${file} has no vision/audio projector to translate; nothing written to ${opts.mmproj}\n`);
      return;
    }
    // A separate projector blob (old LLaVA) has no text side: its translation is the one output.
    const standaloneProjector = text === null;
    const mmprojOut = standaloneProjector ? (opts.mmproj ?? opts.output) : opts.mmproj ?? (opts.output !== undefined ? defaultMmprojPath(opts.output) : undefined);
    if (mmprojOut !== undefined && resolve(mmprojOut) === resolve(file)) {
      throw new CliError("usage", `the projector would be written over the input (${mmprojOut}); choose another path with --mmproj`);
    }

    if (opts.dryRun) {
      if (opts.json) io.out(JSON.stringify({ file, ...describeText(text), mmproj: describeClip(clip, mmprojOut) }, null, 2) + "\n");
      else {
        if (text !== null) io.out(formatReport(text.report) + "\n");
        if (clip !== null) io.out(`mmproj${mmprojOut !== undefined ? ` (${mmprojOut})` : ""}:\n${indent(formatReport(clip.report))}\n`);
      }
      return;
    }

    if (text !== null) await writeWithBar(text, opts.output!, io, opts.quiet);
    if (clip !== null) {
      await writeWithBar(clip, mmprojOut!, io, opts.quiet);
      // Vision must never disappear quietly: say where the projector went when nobody asked.
      if (opts.mmproj === undefined && !standaloneProjector) {
        io.err(`ollama-compat: ${file} embeds a vision/audio projector; wrote it to ${mmprojOut} (pass it to llama.cpp as --mmproj, or choose the path with --mmproj)\n`);
      }
    } else if (opts.mmproj !== undefined) {
      io.err(`ollama-compat: ${file} has no vision/audio projector to translate; nothing written to ${opts.mmproj}\n`);
    }

    if (opts.json) {
      io.out(
        JSON.stringify(
          {
            file,
            ...describeText(text, opts.output),
            mmproj: describeClip(clip, mmprojOut),
          },
          null,
          2,
        ) + "\n",
      );
    } else {
      if (text !== null) io.out(`${file} -> ${opts.output} (${summary(text)})\n`);
      if (clip !== null) io.out(`${file} -> ${mmprojOut} (${summary(clip)})\n`);
    }
  } finally {
    await views.close();
  }
}

async function writeWithBar(view: TranslatedView, path: string, io: CliIo, quiet?: boolean): Promise<void> {
  const bar = progressBar(io, basename(path), { quiet });
  try {
    await view.writeTo(path, { onProgress: (written, total) => bar.update(written, total) });
  } finally {
    bar.done();
  }
}

function summary(view: TranslatedView): string {
  const fixes = view.report.fixes.length > 0 ? `; fixes: ${view.report.fixes.map((f) => f.name).join(", ")}` : "";
  return `${view.report.handlers.map((h) => h.name).join(", ")}${fixes}; ${groupThousands(view.size)} bytes`;
}

/** The text side, in the shape `--json` has always printed (translated, output, size, report). */
function describeText(view: TranslatedView | null, output?: string): Record<string, unknown> {
  if (view === null) return { translated: false };
  return { translated: true, ...(output !== undefined ? { output } : {}), size: view.size, report: view.report };
}

function describeClip(view: TranslatedView | null, output: string | undefined): Record<string, unknown> | null {
  if (view === null) return null;
  return { ...(output !== undefined ? { output } : {}), size: view.size, report: view.report };
}

function indent(text: string): string {
  return text
    .split("\n")
    .map((l) => `  ${l}`)
    .join("\n");
}

/**
 * Whether two paths name one file (through a symlinked directory, a symlink or a hard link):
 * the rename into place would otherwise replace the source's directory entry.
 */
async function sameFile(a: string, b: string): Promise<boolean> {
  try {
    const [x, y] = await Promise.all([stat(a, { bigint: true }), stat(b, { bigint: true })]);
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false; // the output does not exist yet (or the input does not: readGguf says so)
  }
}
