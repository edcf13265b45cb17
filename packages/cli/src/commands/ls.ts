import type { TranslationProfile } from "@compat/handlers";
import { readGguf } from "@compat/gguf";
import { translate } from "@compat/handlers";
import { ModelStore, TranslationCache, type ResolvedModel } from "@compat/server-bridge";
import { humanBytes } from "../format";
import type { CliIo } from "../io";
import { jsonText, terminalSafe } from "../terminal";
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

/** Reads a model's header and decides what serving it takes; a model that cannot be read is one "not supported" row, never the end of the listing. */
async function statusOf(m: ResolvedModel, cache: TranslationCache, env: Record<string, string | undefined>): Promise<ListedModel> {
  try {
    return await readStatus(m, cache, env);
  } catch (e) {
    return { name: m.name, size: m.size, status: "not supported", reason: firstLine(e) };
  }
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0]!;
}

async function readStatus(m: ResolvedModel, cache: TranslationCache, env: Record<string, string | undefined>): Promise<ListedModel> {
  const base = { name: m.name, size: m.size };
  let source;
  try {
    source = await readGguf(m.modelPath);
  } catch (e) {
    return { ...base, status: "not supported", reason: firstLine(e) };
  }
  let architecture: string;
  let view;
  try {
    architecture = source.getString("general.architecture", "?");
    // translate() owns the source from here: it closes it when there is nothing to do
    view = await translate(source, { env, profile: cache.profile });
  } catch (e) {
    await source.close();
    throw e;
  }
  if (!view) {
    // the same verdict as `detect`: Ollama wrote it, and neither a handler nor llama.cpp knows the arch
    const unsupported = unsupportedArch(ollamaWriterMarkers(source), architecture);
    await source.close();
    if (unsupported) return { ...base, architecture, status: "not supported", reason: `no handler, and llama.cpp has no architecture "${architecture}"` };
    return { ...base, architecture, status: "native" };
  }
  try {
    // by the digest remembered for this version of the blob (its name when it was not hashed since it changed)
    const cached = m.modelDigest ? await cache.has(view, "text", m.modelDigest) : false;
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
    if (e.error) rows.push({ name: e.name, size: 0, status: "not supported", reason: firstLine(e.error) });
    else rows.push(await statusOf(e.model!, cache, io.env));
  }
  if (opts.json) {
    io.out(jsonText({ store: store.root, models: rows }, 2) + "\n");
    return;
  }
  if (rows.length === 0) {
    io.out(`no models in ${terminalSafe(store.root)}\n`);
    return;
  }
  // architectures and reasons come from the files: escaped before the columns are measured
  const table = [
    ["NAME", "SIZE", "ARCH", "STATUS"],
    ...rows.map((r) => [terminalSafe(r.name), r.size ? humanBytes(r.size, 1000) : "-", terminalSafe(r.architecture ?? "-"), terminalSafe(r.status + (r.reason ? ` (${r.reason})` : ""))]),
  ];
  const widths = table[0]!.map((_, c) => Math.max(...table.map((row) => row[c]!.length)));
  for (const row of table) io.out(row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]!))).join("  ") + "\n");
}
