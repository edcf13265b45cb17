import { statSync } from "node:fs";
import { stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { formatReport, type TranslatedView, type TranslationProfile } from "@compat/handlers";
import { openViews } from "@compat/views";
import { CliError } from "../errors";
import { groupThousands } from "../format";
import type { CliIo } from "../io";
import { progressBar } from "../progress";
import { jsonText, terminalSafe, terminalSafeLines } from "../terminal";
import { resolveInput, type Input } from "./resolve";

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
  if (opts.output !== undefined && opts.mmproj !== undefined && resolve(opts.output) === resolve(opts.mmproj)) {
    throw new CliError("usage", "-o and --mmproj must be different files");
  }
  // resolved first: a model reference names blobs in the store, and none of them may be an output
  const input = await resolveInput(file, io);
  for (const [flag, path] of [["-o", opts.output], ["--mmproj", opts.mmproj]] as const) await refuseSource(flag, path, input);
  const views = await openViews(input.path, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
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
      if (opts.json) io.out(jsonText({ file, translated: false, profile: opts.profile ?? "native", mmproj: null }, 2) + "\n");
      else io.out(`${terminalSafe(file)}: nothing to do, no output written\n`);
      if (opts.mmproj !== undefined) io.err(terminalSafe(`ollama-compat: ${file} has no vision/audio projector to translate; nothing written to ${opts.mmproj}`) + "\n");
      return;
    }
    // A separate projector blob (old LLaVA) has no text side: its translation is the one output.
    const standaloneProjector = text === null;
    const mmprojOut = standaloneProjector ? (opts.mmproj ?? opts.output) : opts.mmproj ?? (opts.output !== undefined ? defaultMmprojPath(opts.output) : undefined);
    if (mmprojOut !== undefined && opts.mmproj === undefined) await refuseSource("the projector (mmproj-OUT beside -o)", mmprojOut, input);

    if (opts.dryRun) {
      if (opts.json) io.out(jsonText({ file, ...describeText(text), mmproj: describeClip(clip, mmprojOut) }, 2) + "\n");
      else {
        // the reports quote the file's architecture, keys and values
        if (text !== null) io.out(terminalSafeLines(formatReport(text.report)) + "\n");
        if (clip !== null) io.out(terminalSafeLines(`mmproj${mmprojOut !== undefined ? ` (${mmprojOut})` : ""}:\n${indent(formatReport(clip.report))}`) + "\n");
      }
      return;
    }

    const outputs: Array<[TranslatedView, string]> = [];
    if (text !== null) outputs.push([text, opts.output!]);
    if (clip !== null) outputs.push([clip, mmprojOut!]);
    await writeWithBar(outputs, io, opts.quiet);
    if (clip !== null) {
      // Vision must never disappear quietly: say where the projector went when nobody asked.
      if (opts.mmproj === undefined && !standaloneProjector) {
        io.err(terminalSafe(`ollama-compat: ${file} embeds a vision/audio projector; wrote it to ${mmprojOut} (pass it to llama.cpp as --mmproj, or choose the path with --mmproj)`) + "\n");
      }
    } else if (opts.mmproj !== undefined) {
      io.err(terminalSafe(`ollama-compat: ${file} has no vision/audio projector to translate; nothing written to ${opts.mmproj}`) + "\n");
    }

    if (opts.json) {
      io.out(jsonText({ file, ...describeText(text, opts.output), mmproj: describeClip(clip, mmprojOut) }, 2) + "\n");
    } else {
      if (text !== null) io.out(terminalSafe(`${file} -> ${opts.output} (${summary(text)})`) + "\n");
      if (clip !== null) io.out(terminalSafe(`${file} -> ${mmprojOut} (${summary(clip)})`) + "\n");
    }
  } finally {
    await views.close();
  }
}

/**
 * Writes the outputs at once, under one bar: the projector's computed tensors and each file's
 * final fsync overlap the other file's copying, where one after the other left the disk idle
 * between the two files. The first failure stops the others (each removes its temp file).
 */
async function writeWithBar(outputs: ReadonlyArray<[TranslatedView, string]>, io: CliIo, quiet?: boolean): Promise<void> {
  const bar = progressBar(io, outputs.map(([, path]) => basename(path)).join(" + "), { quiet });
  const total = outputs.reduce((n, [view]) => n + view.size, 0);
  const written = outputs.map(() => 0);
  const stop = new AbortController();
  try {
    const done = await Promise.allSettled(
      outputs.map(([view, path], i) =>
        view
          .writeTo(path, {
            signal: stop.signal,
            onProgress: (n) => {
              written[i] = n;
              bar.update(
                written.reduce((a, b) => a + b, 0),
                total,
              );
            },
          })
          .catch((e: unknown) => {
            stop.abort(e);
            throw e;
          }),
      ),
    );
    // the failure that stopped the others, not their aborts
    const failed = done.find((r): r is PromiseRejectedResult => r.status === "rejected" && r.reason === stop.signal.reason);
    if (failed !== undefined) throw failed.reason;
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
 * An output must be none of the input's files (by path or by identity: a symlinked directory,
 * a symlink, a hard link), and for a store model nothing in the store's blobs/ (the model's
 * own template or params blob, another model's weights): the rename into place would
 * replace that file.
 */
async function refuseSource(flag: string, output: string | undefined, input: Input): Promise<void> {
  if (output === undefined) return;
  for (const source of input.files) {
    if (resolve(output) === resolve(source) || (await sameFile(output, source))) {
      throw new CliError("usage", `${flag}: the output must not be the input (${source}): the source file is never modified`);
    }
  }
  if (input.storeBlobs !== undefined && (await sameFile(dirname(resolve(output)), input.storeBlobs))) {
    throw new CliError("usage", `${flag} ${output}: is in the Ollama store's blobs (${input.storeBlobs}), which are never written`);
  }
}

/** Whether two paths name one file; false when either does not exist (an output not written yet). */
async function sameFile(a: string, b: string): Promise<boolean> {
  try {
    const [x, y] = await Promise.all([stat(a, { bigint: true }), stat(b, { bigint: true })]);
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
}
