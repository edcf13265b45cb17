import { readGguf, type GgufModel } from "@compat/gguf";
import { compatEnabled, detectHandlers, gatesOn, textHandlers, type TranslationProfile } from "@compat/handlers";
import { clipViewModel } from "@compat/clip";
import { ExitCode, paint, type CliIo } from "../io";
import { LLAMA_CPP_ARCHS } from "../llama-archs";
import { ollamaWriterMarkers } from "../ollama-written";
import { jsonText, terminalSafe } from "../terminal";
import { resolveInput } from "./resolve";

/**
 * native: llama.cpp loads the file as it is; supported: Ollama-format and this version
 * translates it; not-supported: Ollama-written (see ollamaWriterMarkers), no handler of this
 * version knows its architecture, and stock llama.cpp has no architecture of that name
 * either; disabled: OLLAMA_LLAMA_CPP_COMPAT=0.
 *
 * An Ollama-written file of an architecture llama.cpp knows and no handler gates on is
 * native: the reference's compat layer has no handler for it either, so Ollama itself
 * hands it to llama.cpp unchanged.
 */
export type DetectStatus = "native" | "supported" | "not-supported" | "disabled";

export interface Detection {
  status: DetectStatus;
  architecture: string;
  handlers: Array<{ name: string; markers: readonly string[] }>;
  clipHandlers: Array<{ name: string; markers: readonly string[] }>;
  /** Traces of Ollama's GGUF writer, or null. */
  ollamaWriter: string[] | null;
}

/** What `detect` reports, for a model already read. */
export function classify(model: GgufModel, env: Record<string, string | undefined>, profile?: TranslationProfile): Detection {
  const architecture = model.getString("general.architecture", "unknown");
  const ollamaWriter = ollamaWriterMarkers(model);
  if (!compatEnabled(env)) return { status: "disabled", architecture, handlers: [], clipHandlers: [], ollamaWriter };
  const handlers = detectHandlers(model, { env, ...(profile !== undefined ? { profile } : {}) });
  // the clip side: which handler would write this file's mmproj
  const clipHandlers = clipViewModel(model, { env, ...(profile !== undefined ? { profile } : {}) })?.report.handlers.map((h) => ({ name: h.name, markers: h.markers })) ?? [];
  let status: DetectStatus = "native";
  if (handlers.length > 0 || clipHandlers.length > 0) status = "supported";
  else if (unsupportedArch(ollamaWriter, architecture)) status = "not-supported";
  return { status, architecture, handlers, clipHandlers, ollamaWriter };
}

/** Ollama wrote it, no handler looks at its architecture, and llama.cpp does not know the name. */
export function unsupportedArch(ollamaWriter: string[] | null, architecture: string): boolean {
  return ollamaWriter !== null && !textHandlers.some((h) => gatesOn(h, architecture)) && !LLAMA_CPP_ARCHS.has(architecture);
}

export async function detectCommand(file: string, opts: { json?: boolean; profile?: TranslationProfile }, io: CliIo): Promise<number> {
  const model = await readGguf((await resolveInput(file, io)).path);
  let d: Detection;
  try {
    d = classify(model, io.env, opts.profile);
  } finally {
    await model.close();
  }
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
