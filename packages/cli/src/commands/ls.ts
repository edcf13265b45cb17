import type { TranslationProfile } from "@compat/handlers";
import { TranslationCache } from "@compat/prepare";
import { ModelStore, type ResolvedModel } from "@compat/store";
import { openViews, type FileStatus } from "@compat/views";
import { humanBytes } from "../format";
import type { CliIo } from "../io";
import { jsonText, terminalSafe } from "../terminal";
import { bridgeEnv, commandCache } from "./cache-dir";

/**
 * @compat/views' status of the model file, with `supported` told apart by what serving it takes:
 * `translatable` (a translation to write) or `cached` (its text translation is in the cache).
 */
export type ModelStatus = Exclude<FileStatus, "supported"> | "translatable" | "cached";

export interface ListedModel {
  name: string;
  size: number;
  architecture?: string;
  status: ModelStatus;
  /** Why it is not supported. */
  reason?: string;
}

/** Reads a model's header and decides what serving it takes; a model that cannot be read is one "not-supported" row, never the end of the listing. */
async function statusOf(m: ResolvedModel, cache: TranslationCache, env: Record<string, string | undefined>): Promise<ListedModel> {
  try {
    return await readStatus(m, cache, env);
  } catch (e) {
    return { name: m.name, size: m.size, status: "not-supported", reason: firstLine(e) };
  }
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0]!;
}

async function readStatus(m: ResolvedModel, cache: TranslationCache, env: Record<string, string | undefined>): Promise<ListedModel> {
  const base = { name: m.name, size: m.size };
  let views;
  try {
    views = await openViews(m.modelPath, { env, profile: cache.profile, projectors: m.projectors });
  } catch (e) {
    return { ...base, status: "not-supported", reason: firstLine(e) };
  }
  try {
    const { status, architecture, text } = views;
    if (status === "not-supported") return { ...base, architecture, status, reason: `no handler, and llama.cpp has no architecture "${architecture}"` };
    if (status !== "supported") return { ...base, architecture, status };
    // by the digest remembered for this version of the blob (its name when it was not hashed since it changed)
    const cached = text !== null && m.modelDigest ? await cache.has(text, "text", m.modelDigest) : false;
    return { ...base, architecture, status: cached ? "cached" : "translatable" };
  } finally {
    await views.close();
  }
}

/** At most `width` jobs at once, the others waiting their turn. */
function limiter(width: number): { run<T>(job: () => Promise<T>): Promise<T> } {
  let active = 0;
  const waiting: Array<() => void> = [];
  return {
    async run<T>(job: () => Promise<T>): Promise<T> {
      // a slot is taken here, or handed over by the job that ends
      if (active >= width) await new Promise<void>((r) => waiting.push(r));
      else active++;
      try {
        return await job();
      } finally {
        const next = waiting.shift();
        if (next) next();
        else active--;
      }
    },
  };
}

/** `ls`: installed models with size, architecture and what serving them takes. */
export async function lsCommand(opts: { json?: boolean; models?: string; cacheDir?: string; profile?: TranslationProfile }, io: CliIo): Promise<void> {
  const store = new ModelStore(opts.models, io.env);
  const cache = commandCache(bridgeEnv(io.env, opts.cacheDir), opts.profile);
  const reading = limiter(4);
  // tags of one model (and copies) share their blobs: each set of files is read once, and a few at a time
  const statuses = new Map<string, Promise<ListedModel>>();
  const rows = await Promise.all(
    (await store.list()).map(async (e): Promise<ListedModel> => {
      if (e.error) return { name: e.name, size: 0, status: "not-supported", reason: firstLine(e.error) };
      const m = e.model!;
      const files = JSON.stringify([m.modelPath, m.modelDigest, m.projectors]);
      let status = statuses.get(files);
      if (status === undefined) statuses.set(files, (status = reading.run(() => statusOf(m, cache, io.env))));
      return { ...(await status), name: m.name, size: m.size };
    }),
  );
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
