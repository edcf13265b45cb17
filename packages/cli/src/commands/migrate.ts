import type { TranslationProfile } from "@compat/handlers";
import { BridgeError, findLlamaTool, launch, type RunningServer } from "@compat/server-bridge";
import { migrateStore, planMigration, pruneMigration, undoMigration, type MigratedPair, type MigrationPlan } from "../migrate";
import { CliError } from "../errors";
import { humanBytes } from "../format";
import { ExitCode, type CliIo } from "../io";
import { embeddingLength, llamaErrorText, notReadyText, projectorAnswers, textAnswer } from "../llama-check";
import { jsonText, terminalSafe } from "../terminal";

export interface MigrateFlags {
  all?: boolean;
  dryRun?: boolean;
  undo?: boolean;
  prune?: boolean;
  /** commander's --no-verify: false. */
  verify?: boolean;
  json?: boolean;
  models?: string;
  llamaServer?: string;
  profile?: TranslationProfile;
}

/**
 * `migrate [MODEL...] [--all]`: rewrites the store's Ollama-format models into llama.cpp's
 * layout in place (../migrate.ts), each loaded by llama-server before its
 * manifest switches; `--undo` puts the old manifests back, `--prune` drops the rollback records
 * and the blobs nothing references any more.
 */
export async function migrateCommand(names: string[], opts: MigrateFlags, io: CliIo): Promise<number> {
  if ([opts.undo, opts.prune].filter(Boolean).length > 1) throw new CliError("usage", "--undo and --prune are two different steps; run one at a time");
  const env = opts.models !== undefined ? { ...io.env, OLLAMA_MODELS: opts.models } : io.env;
  const base = { env, ...(names.length > 0 ? { names } : {}), onProgress: (line: string) => (opts.json ? undefined : io.err(terminalSafe(line) + "\n")) };
  if (opts.undo) {
    if (opts.dryRun) throw new CliError("usage", "--dry-run plans a migration; --undo has nothing to plan");
    const r = await undoMigration(base);
    if (opts.json) io.out(jsonText(r, 2) + "\n");
    else {
      io.out(`restored ${r.restored.length} model${r.restored.length === 1 ? "" : "s"}\n`);
      for (const m of r.missing) io.out(terminalSafe(`${m}: no rollback record (not migrated, or pruned)`) + "\n");
    }
    return r.missing.length > 0 ? ExitCode.error : ExitCode.ok;
  }
  if (opts.prune) {
    if (opts.dryRun) throw new CliError("usage", "--dry-run plans a migration; --prune has nothing to plan");
    const r = await pruneMigration(base);
    if (opts.json) io.out(jsonText(r, 2) + "\n");
    else {
      const freed = r.removedBlobs.reduce((s, b) => s + b.size, 0);
      io.out(`dropped ${r.droppedRecords.length} rollback record${r.droppedRecords.length === 1 ? "" : "s"}; removed ${r.removedBlobs.length} unreferenced blob${r.removedBlobs.length === 1 ? "" : "s"} (${humanBytes(freed, 1000)})\n`);
      if (r.youngKept > 0) io.out(`kept ${r.youngKept} unreferenced blob${r.youngKept === 1 ? "" : "s"} younger than an hour (a pull may be about to use it; Ollama waits as long)\n`);
      for (const m of r.missing) io.out(terminalSafe(`${m}: no rollback record`) + "\n");
    }
    return ExitCode.ok;
  }
  if (names.length === 0 && !opts.all) throw new CliError("usage", "name the models to migrate, or --all for every model of the store");
  if (names.length > 0 && opts.all) throw new CliError("usage", "--all migrates every model; name models or pass --all, not both");
  const common = { ...base, ...(opts.profile ? { profile: opts.profile } : {}) };
  if (opts.dryRun) {
    const plan = await planMigration(common);
    if (opts.json) io.out(jsonText({ plan }, 2) + "\n");
    else io.out(planText(plan));
    return ExitCode.ok;
  }
  if (opts.verify !== false) {
    // every model would fail its verification the same way: said once, before anything is written
    try {
      findLlamaTool("llama-server", { explicit: opts.llamaServer, env });
    } catch (e) {
      throw new CliError("error", `${e instanceof Error ? e.message : String(e)}; migrate loads each model in llama-server before switching it (--no-verify skips that)`);
    }
  }
  const result = await migrateStore({
    ...common,
    onPlan: (plan) => (opts.json ? undefined : io.out(planText(plan))),
    ...(opts.verify !== false ? { verify: (pair: MigratedPair) => verifyPair(pair, env, opts.llamaServer) } : {}),
  });
  if (opts.json) io.out(jsonText(result, 2) + "\n");
  else {
    io.out(`migrated ${result.migrated.length} model${result.migrated.length === 1 ? "" : "s"}${opts.verify === false ? " (not verified: --no-verify)" : ""}\n`);
    for (const f of result.failed) io.out(terminalSafe(`${f.name}: not migrated: ${f.reason}`) + "\n");
    if (result.migrated.length > 0) io.out("the old manifests are kept as rollback records: `ollama-compat migrate --undo` restores them, `--prune` frees their disk\n");
  }
  return result.failed.length > 0 ? ExitCode.error : ExitCode.ok;
}

/** The plan as people read it: what changes per model, the disk, reflinks, shared blobs. */
function planText(plan: MigrationPlan): string {
  const lines = [`store ${plan.store}`];
  for (const m of plan.models) {
    if (m.sharesWith) {
      lines.push(`  ${m.name}: shares its model blob with ${m.sharesWith} (migrated once, nothing more to write)`);
      continue;
    }
    if (m.reused) {
      lines.push(`  ${m.name}: reuses the blobs an earlier run wrote for another name of the same blob (nothing to write)`);
      continue;
    }
    const what = m.changes.map((c) => `${c.layer} ${c.from ? `${c.from.slice(0, 19)}… ` : ""}-> ${c.what} (${humanBytes(c.bytes, 1000)})`);
    lines.push(`  ${m.name}: ${what.join("; ")}`);
  }
  for (const s of plan.skipped) lines.push(`  ${s.name}: left alone: ${s.reason}`);
  if (plan.models.length === 0) lines.push("  nothing to migrate");
  lines.push(`disk: writes up to ${humanBytes(plan.bytesNeeded, 1000)}, ${humanBytes(plan.freeBytes, 1000)} free`);
  lines.push(`reflinks: ${plan.reflinks}: ${plan.reflinksDetail}`);
  for (const s of plan.shared) lines.push(`shared blob ${s.digest.slice(0, 19)}… serves ${s.names.join(", ")}`);
  return lines.map((l) => terminalSafe(l)).join("\n") + "\n";
}

/** What `verify` asks of a model, on the migrated blobs: a few tokens (an embedding), and an image or audio answer (as the projector encodes) when there is one. */
export async function verifyPair(pair: MigratedPair, env: Record<string, string | undefined>, llamaServer?: string): Promise<void> {
  const args = ["--model", pair.modelPath, "--ctx-size", "1024", "--no-warmup"];
  if (pair.mmproj) args.push("--mmproj", pair.mmproj);
  if (pair.embedding) args.push("--embedding");
  let server: RunningServer | undefined;
  try {
    server = await launch(args, { env, ...(llamaServer !== undefined ? { llamaServer } : {}), startTimeoutMs: 600_000 }).catch((e: unknown) => {
      // an exit status says nothing of the cause: llama.cpp's own line (e.g. the buffer it could not allocate) goes with it
      if (e instanceof BridgeError && (e.code === "SERVER_START_FAILED" || e.code === "SERVER_START_TIMEOUT")) throw new Error(notReadyText(e, `ollama-compat migrate ${pair.names[0]}`));
      throw e;
    });
    try {
      if (pair.embedding) {
        if ((await embeddingLength(server.url)) <= 0) throw new Error("an empty embedding");
      } else if ((await textAnswer(server.url)).completionTokens <= 0) throw new Error("no tokens generated");
      // an image answer for a vision projector, an audio answer (a generated WAV) for one that encodes sound
      if (pair.mmproj && !pair.embedding) {
        for (const a of await projectorAnswers(server.url, pair.mmproj)) if (!a.ok) throw new Error(`the ${a.input} was not encoded (no ${a.input} tokens in the prompt)`);
      }
    } catch (e) {
      throw new Error(`${e instanceof Error ? e.message : String(e)} (${llamaErrorText(server.lastLines(20))})`);
    }
  } finally {
    await server?.stop();
  }
}
