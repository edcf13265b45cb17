import { stat } from "node:fs/promises";
import { resolve } from "node:path";
import { readGguf } from "@compat/gguf";
import { formatReport, translateModel } from "@compat/handlers";
import { CliError } from "../errors";
import type { CliIo } from "../io";

export interface TranslateFlags {
  output?: string;
  dryRun?: boolean;
  json?: boolean;
}

export async function translateCommand(file: string, opts: TranslateFlags, io: CliIo): Promise<void> {
  if (!opts.dryRun && opts.output === undefined) throw new CliError("usage", "translate needs -o OUT.gguf (or --dry-run)");
  if (opts.output !== undefined && (resolve(opts.output) === resolve(file) || (await sameFile(opts.output, file)))) {
    throw new CliError("usage", "the output must not be the input: the source file is never modified");
  }
  const model = await readGguf(file);
  try {
    const view = translateModel(model, { env: io.env });
    if (view === null) {
      if (opts.json) io.out(JSON.stringify({ file, translated: false }, null, 2) + "\n");
      else io.out(`${file}: nothing to do, no output written\n`);
      return;
    }
    if (opts.dryRun) {
      io.out(opts.json ? JSON.stringify({ file, translated: true, size: view.size, report: view.report }, null, 2) + "\n" : formatReport(view.report) + "\n");
      return;
    }
    await view.writeTo(opts.output!);
    if (opts.json) io.out(JSON.stringify({ file, translated: true, output: opts.output, size: view.size, report: view.report }, null, 2) + "\n");
    else io.out(`${file} -> ${opts.output} (${view.report.handlers.map((h) => h.name).join(", ")}; ${view.size.toLocaleString("en-US")} bytes)\n`);
  } finally {
    await model.close();
  }
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
