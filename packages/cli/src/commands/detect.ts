import type { TranslatedView, TranslationProfile } from "@compat/handlers";
import { openViews, type FileStatus, type ModelViews } from "@compat/views";
import { ExitCode, paint, type CliIo } from "../io";
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
  const views = await openViews(await resolveInput(file, io), { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
  const d = detection(views);
  await views.close();
  const exit = d.status === "not-supported" ? ExitCode.notSupported : ExitCode.ok;
  if (opts.json) {
    io.out(JSON.stringify({ file, ...d, compatEnabled: d.status !== "disabled", profile: opts.profile ?? "native", exitCode: exit }, null, 2) + "\n");
    return exit;
  }
  const c = paint(io, "out");
  switch (d.status) {
    case "disabled":
      io.out(`${file}: nothing to do (OLLAMA_LLAMA_CPP_COMPAT=0 disables translation)\n`);
      break;
    case "native":
      io.out(
        `${file}: ${c(32, "native")}, nothing to do (llama.cpp loads ${d.architecture} as it is${d.ollamaWriter ? "; written by Ollama, no handler needed" : ""})\n`,
      );
      break;
    case "supported":
      io.out(`${file}: ${c(36, "Ollama-format, supported")} (${d.architecture}); translate it with: ollama-compat translate ${file} -o OUT.gguf\n`);
      for (const h of d.handlers) io.out(`${file}: ${h.name} (markers: ${h.markers.join("; ")})\n`);
      for (const h of d.clipHandlers) io.out(`${file}: mmproj ${h.name} (markers: ${h.markers.join("; ")})\n`);
      break;
    case "not-supported":
      io.out(
        `${file}: ${c(33, "Ollama-format but not supported by this version")}: neither a handler nor llama.cpp knows architecture "${d.architecture}" ` +
          `(Ollama writer markers: ${d.ollamaWriter!.join("; ")})\n`,
      );
      break;
  }
  return exit;
}
