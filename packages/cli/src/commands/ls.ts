import type { TranslationProfile } from "@compat/handlers";
import { readGguf } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { ModelStore, TranslationCache, type ResolvedModel } from "@compat/server-bridge";
import { humanBytes } from "../format";
import type { CliIo } from "../io";
import { ollamaWriterMarkers } from "../ollama-written";
import { bridgeEnv, commandCache } from "./cache-dir";
import { unsupportedArch } from "./detect";

export type ModelStatus = "native" | "translatable" | "cached" | "not supported";

export interface ListedModel {
  name: string;
  size: number;
  architecture?: string;
  status: ModelStatus;
  /** Why it is not supported. */
  reason?: string;
}

/** Reads a model's header and decides what serving it takes. */
async function statusOf(m: ResolvedModel, cache: TranslationCache, env: Record<string, string | undefined>): Promise<ListedModel> {
  const base = { name: m.name, size: m.size };
  let source;
  try {
    source = await readGguf(m.modelPath);
  } catch (e) {
    return { ...base, status: "not supported", reason: (e as Error).message.split("\n")[0] };
  }
  const architecture = source.getString("general.architecture", "?");
  // translate() owns the source from here: it closes it when there is nothing to do
  const view = await translate(source, { env, profile: cache.profile });
  if (!view) {
    // the same verdict as `detect`: Ollama wrote it, and neither a handler nor llama.cpp knows the arch
    const unsupported = unsupportedArch(ollamaWriterMarkers(source), architecture);
    await source.close();
    if (unsupported) return { ...base, architecture, status: "not supported", reason: `no handler, and llama.cpp has no architecture "${architecture}"` };
    return { ...base, architecture, status: "native" };
  }
  try {
    const cached = m.modelDigest ? await cache.has(m.modelDigest, "text", view) : false;
    return { ...base, architecture, status: cached ? "cached" : "translatable" };
  } finally {
    await view.close();
  }
}

/** `ls`: installed models with size, architecture and what serving them takes. */
export async function lsCommand(opts: { json?: boolean; models?: string; cacheDir?: string; profile?: TranslationProfile }, io: CliIo): Promise<void> {
  const store = new ModelStore(opts.models, io.env);
  const cache = commandCache(bridgeEnv(io.env, opts.cacheDir), opts.profile);
  const rows: ListedModel[] = [];
  for (const e of await store.list()) {
    if (e.error) rows.push({ name: e.name, size: 0, status: "not supported", reason: e.error.message.split("\n")[0] });
    else rows.push(await statusOf(e.model!, cache, io.env));
  }
  if (opts.json) {
    io.out(JSON.stringify({ store: store.root, models: rows }, null, 2) + "\n");
    return;
  }
  if (rows.length === 0) {
    io.out(`no models in ${store.root}\n`);
    return;
  }
  const table = [["NAME", "SIZE", "ARCH", "STATUS"], ...rows.map((r) => [r.name, r.size ? humanBytes(r.size, 1000) : "-", r.architecture ?? "-", r.status + (r.reason ? ` (${r.reason})` : "")])];
  const widths = table[0]!.map((_, c) => Math.max(...table.map((row) => row[c]!.length)));
  for (const row of table) io.out(row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]!))).join("  ") + "\n");
}
