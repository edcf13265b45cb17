import { readGguf } from "@compat/gguf";
import { compatEnabled, detectHandlers, type TranslationProfile } from "@compat/handlers";
import { clipViewModel } from "@compat/clip";
import type { CliIo } from "../io";
import { resolveInput } from "./resolve";

export async function detectCommand(file: string, opts: { json?: boolean; profile?: TranslationProfile }, io: CliIo): Promise<void> {
  const model = await readGguf(await resolveInput(file, io));
  try {
    const enabled = compatEnabled(io.env);
    const handlers = detectHandlers(model, { env: io.env, ...(opts.profile !== undefined ? { profile: opts.profile } : {}) });
    // the clip side: which handler would write this file's mmproj
    const clipHandlers = clipViewModel(model, { env: io.env })?.report.handlers.map((h) => ({ name: h.name, markers: h.markers })) ?? [];
    if (opts.json) {
      io.out(JSON.stringify({ file, compatEnabled: enabled, profile: opts.profile ?? "native", handlers, clipHandlers }, null, 2) + "\n");
    } else if (!enabled) {
      io.out(`${file}: nothing to do (OLLAMA_LLAMA_CPP_COMPAT=0 disables translation)\n`);
    } else if (handlers.length === 0 && clipHandlers.length === 0) {
      io.out(`${file}: nothing to do (llama.cpp can load it as it is, or no handler knows it)\n`);
    } else {
      for (const h of handlers) io.out(`${file}: ${h.name} (markers: ${h.markers.join("; ")})\n`);
      for (const h of clipHandlers) io.out(`${file}: mmproj ${h.name} (markers: ${h.markers.join("; ")})\n`);
    }
  } finally {
    await model.close();
  }
}
