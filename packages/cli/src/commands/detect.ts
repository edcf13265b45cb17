import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { openViews, type FileStatus, type ModelViews } from "@compat/views";
import { ExitCode, paint, type CliIo } from "../io";
import { jsonText, terminalSafe } from "../terminal";
import { resolveInput } from "./resolve";

/** What `detect` reports: @compat/views' status of the file, with the handlers and markers behind it. */
export interface Detection {
  status: FileStatus;
  architecture: string;
  handlers: Array<{ name: string; markers: readonly string[] }>;
  clipHandlers: Array<{ name: string; markers: readonly string[] }>;
  /** Traces of Ollama's GGUF writer, or null. */
  ollamaWriter: readonly string[] | null;
}

function detection(v: ModelViews): Detection {
  const handlers = (view: TranslatedView | null) => view?.report.handlers.map((h) => ({ name: h.name, markers: h.markers })) ?? [];
  return {
    status: v.status,
    architecture: v.architecture,
    handlers: handlers(v.text),
    clipHandlers: handlers(v.mmproj?.kind === "view" ? v.mmproj.view : null),
    ollamaWriter: v.ollamaWriter,
  };
}

export async function detectCommand(file: string, opts: { json?: boolean; profile?: TranslationProfile }, io: CliIo): Promise<number> {
  const views = await openViews((await resolveInput(file, io)).path, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
  const d = detection(views);
  await views.close();
  const exit = d.status === "not-supported" ? ExitCode.notSupported : ExitCode.ok;
  if (opts.json) {
    io.out(jsonText({ file, ...d, compatEnabled: d.status !== "disabled", profile: opts.profile ?? "native", exitCode: exit }, 2) + "\n");
    return exit;
  }
  const c = paint(io, "out");
  // the argument and everything read from the file (architecture, markers naming keys) printed escaped
  const f = terminalSafe(file);
  const arch = terminalSafe(d.architecture);
  const list = (items: readonly string[]) => terminalSafe(items.join("; "));
  switch (d.status) {
    case "disabled":
      io.out(`${f}: nothing to do (OLLAMA_LLAMA_CPP_COMPAT=0 disables translation)\n`);
      break;
    case "native":
      io.out(
        `${f}: ${c(32, "native")}, nothing to do (llama.cpp loads ${arch} as it is${d.ollamaWriter ? "; written by Ollama, no handler needed" : ""})\n`,
      );
      break;
    case "supported":
      io.out(`${f}: ${c(36, "Ollama-format, supported")} (${arch}); translate it with: ollama-compat translate ${f} -o OUT.gguf\n`);
      for (const h of d.handlers) io.out(`${f}: ${h.name} (markers: ${list(h.markers)})\n`);
      for (const h of d.clipHandlers) io.out(`${f}: mmproj ${h.name} (markers: ${list(h.markers)})\n`);
      break;
    case "not-supported":
      io.out(
        `${f}: ${c(33, "Ollama-format but not supported by this version")}: neither a handler nor llama.cpp knows architecture "${arch}" ` +
          `(Ollama writer markers: ${list(d.ollamaWriter!)})\n`,
      );
      break;
  }
  return exit;
}
