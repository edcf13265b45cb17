import { resolve } from "node:path";
import { readGguf } from "@compat/gguf";
import { formatReport, translateModel, type TranslationProfile } from "@compat/handlers";
import { CliError } from "../errors";
import type { CliIo } from "../io";

export interface TranslateFlags {
  output?: string;
  dryRun?: boolean;
  json?: boolean;
  /** Default native. */
  profile?: TranslationProfile;
}

export async function translateCommand(file: string, opts: TranslateFlags, io: CliIo): Promise<void> {
  if (!opts.dryRun && opts.output === undefined) throw new CliError("usage", "translate needs -o OUT.gguf (or --dry-run)");
  if (opts.output !== undefined && resolve(opts.output) === resolve(file)) {
    throw new CliError("usage", "the output must not be the input: the source file is never modified");
  }
  const model = await readGguf(file);
  try {
    const view = translateModel(model, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
    if (view === null) {
      if (opts.json) io.out(JSON.stringify({ file, translated: false, profile: opts.profile ?? "native" }, null, 2) + "\n");
      else io.out(`${file}: nothing to do, no output written\n`);
      return;
    }
    if (opts.dryRun) {
      io.out(opts.json ? JSON.stringify({ file, translated: true, size: view.size, report: view.report }, null, 2) + "\n" : formatReport(view.report) + "\n");
      return;
    }
    await view.writeTo(opts.output!);
    if (opts.json) io.out(JSON.stringify({ file, translated: true, output: opts.output, size: view.size, report: view.report }, null, 2) + "\n");
    else {
      const fixes = view.report.fixes.length > 0 ? `; fixes: ${view.report.fixes.map((f) => f.name).join(", ")}` : "";
      io.out(`${file} -> ${opts.output} (${view.report.handlers.map((h) => h.name).join(", ")}${fixes}; ${view.size.toLocaleString("en-US")} bytes)\n`);
    }
  } finally {
    await model.close();
  }
}
