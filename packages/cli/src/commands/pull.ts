import type { TranslationProfile } from "@compat/handlers";
import { ModelStore, pullModel, type PullProgress } from "@compat/store";
import { CliError } from "../errors";
import { humanBytes } from "../format";
import type { CliIo } from "../io";
import { progressBar, type ProgressBar } from "../progress";
import { jsonText, terminalSafe } from "../terminal";

export interface PullCommandOptions {
  insecure?: boolean;
  models?: string;
  json?: boolean;
  quiet?: boolean;
  /** Straight into llama.cpp's layout in this folder (pull-to.ts) instead of the store. */
  to?: string;
  layout?: "models-dir" | "lmstudio" | "llama-swap";
  force?: boolean;
  profile?: TranslationProfile;
  llamaServer?: string;
}

/**
 * `pull NAME[:TAG]`: the model from its registry (registry.ollama.ai unless the name has a
 * host) into the Ollama store, as `ollama pull` leaves it. `--json` prints Ollama's progress
 * objects, one per line; a terminal gets a bar per layer; a log gets one line per step.
 */
export async function pullCommand(ref: string, opts: PullCommandOptions, io: CliIo): Promise<void> {
  if (opts.to !== undefined) {
    if (opts.models !== undefined) throw new CliError("usage", "--to and --models: a pull goes into the store or into a folder, not both");
    const { pullToCommand } = await import("./pull-to");
    return pullToCommand(ref, { ...opts, to: opts.to }, io);
  }
  if (opts.layout !== undefined && opts.layout !== "models-dir") throw new CliError("usage", "--layout needs --to DIR");
  const store = new ModelStore(opts.models, io.env);
  const minPart = Number(io.env.OLLAMA_COMPAT_PULL_MIN_PART_BYTES);
  const show = opts.json ? (p: PullProgress) => io.out(jsonText(p) + "\n") : humanProgress(io, opts.quiet === true);
  const pulled = await pullModel(ref, {
    root: store.root,
    insecure: opts.insecure,
    onProgress: show,
    env: io.env,
    ...(Number.isSafeInteger(minPart) && minPart > 0 ? { minPartBytes: minPart } : {}),
  });
  if (!opts.json) io.out(`pulled ${terminalSafe(ref)} into ${terminalSafe(store.root)} (${terminalSafe(pulled.manifestPath)})\n`);
}

/**
 * A bar per layer and the steps between them on a terminal; in a log, one line per layer (a
 * failure before any layer is then the error's line alone).
 */
export function humanProgress(io: CliIo, quiet: boolean): (p: PullProgress) => void {
  let bar: ProgressBar | undefined;
  let current = "";
  return (p) => {
    if (quiet) return;
    if (p.digest !== undefined && p.total !== undefined) {
      if (p.digest !== current) {
        bar?.done();
        current = p.digest;
        bar = progressBar(io, p.status);
        if (io.errTTY !== true) io.err(`${p.status} (${humanBytes(p.total)})\n`);
      }
      bar?.update(p.completed ?? 0, p.total);
      return;
    }
    bar?.done();
    bar = undefined;
    current = "";
    if (io.errTTY === true && p.status !== "success") io.err(`${terminalSafe(p.status)}\n`);
  };
}
