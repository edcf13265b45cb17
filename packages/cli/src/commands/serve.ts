import { readFile } from "node:fs/promises";
import type { TranslationProfile } from "@compat/handlers";
import { BridgeError, crashCause, ModelStore, serveOllama, startServer, TranslationCache, type ExitInfo, type ServeOllamaOptions } from "@compat/server-bridge";
import { CliError } from "../errors";
import type { CliIo } from "../io";
import { startFailureText } from "../llama-check";
import { progressBar, type ProgressBar } from "../progress";

export interface ServeFlags {
  all?: boolean;
  host?: string;
  port?: string;
  llamaServer?: string;
  rpc?: string;
  models?: string;
  cacheDir?: string;
  startTimeout?: string;
  profile?: TranslationProfile;
  apiKeyFile?: string;
  insecure?: boolean;
  modelsMax?: string;
  keepAlive?: string;
}

const SIGNAL_EXIT: Record<string, number> = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129 };
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * While serving, the signals are ours alone: a handler that exits at once (the binary's
 * temp-file cleanup) would orphan llama-server. We stop llama-server, or abort the cache
 * write (which removes its own staging files), then return the signal's exit code.
 * Returns a function that gives the signals back.
 */
function takeSignals(onSignal: (sig: NodeJS.Signals) => void): () => void {
  const saved = SIGNALS.map((sig) => [sig, process.rawListeners(sig) as Array<(...a: unknown[]) => void>] as const);
  for (const sig of SIGNALS) {
    process.removeAllListeners(sig);
    process.on(sig, onSignal);
  }
  return () => {
    for (const [sig, listeners] of saved) {
      process.off(sig, onSignal);
      for (const l of listeners) process.on(sig, l);
    }
  };
}

/**
 * `serve MODEL [-- llama-server args]` or `serve --all`: prints the URL on a line of its own
 * (stdout) once llama-server is healthy, streams llama-server's log prefixed on stderr, and
 * stops it on SIGINT/SIGTERM. Returns the exit code.
 */
export async function serveCommand(model: string | undefined, passthrough: string[], opts: ServeFlags, io: CliIo): Promise<number> {
  if (opts.all && model !== undefined) passthrough = [model, ...passthrough];
  if (!opts.all && model === undefined) throw new CliError("usage", "serve needs a MODEL (or --all)");
  const port = opts.port === undefined ? undefined : Number(opts.port);
  if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535)) throw new CliError("usage", `--port ${opts.port}: not a port number`);
  const startTimeoutMs = opts.startTimeout === undefined ? undefined : Number(opts.startTimeout) * 1000;

  const modelsMax = opts.modelsMax === undefined ? undefined : Number(opts.modelsMax);
  if (modelsMax !== undefined && (!Number.isInteger(modelsMax) || modelsMax < 0)) throw new CliError("usage", `--models-max ${opts.modelsMax}: expected a whole number (0: no limit)`);

  const ac = new AbortController();
  let server: { pid?: number; url: string; exited: Promise<ExitInfo>; stop(graceMs?: number): Promise<ExitInfo> } | undefined;
  let caught: NodeJS.Signals | undefined;
  const onSignal = (sig: NodeJS.Signals) => {
    if (caught) {
      // a second signal: no more grace
      void server?.stop(0);
      return;
    }
    caught = sig;
    io.err(`ollama-compat: ${sig}, stopping\n`);
    ac.abort();
    void server?.stop();
  };
  const giveBack = takeSignals(onSignal);

  let lastPct = -1;
  let bar: ProgressBar | undefined;
  const common = {
    store: new ModelStore(opts.models, io.env),
    cache: new TranslationCache({ env: io.env, ...(opts.cacheDir ? { dir: opts.cacheDir } : {}), ...(opts.profile ? { profile: opts.profile } : {}) }),
    env: io.env,
    // serve --all answers on Ollama's address (OLLAMA_HOST) unless told; one model on loopback
    host: opts.host ?? (opts.all ? undefined : "127.0.0.1"),
    // the key travels by file or environment, never as an argument other users can read
    apiKey: opts.apiKeyFile !== undefined ? await readApiKey(opts.apiKeyFile) : io.env.LLAMA_API_KEY || undefined,
    insecure: opts.insecure === true,
    port,
    llamaServer: opts.llamaServer,
    rpc: opts.rpc ? opts.rpc.split(",").map((s) => s.trim()).filter(Boolean) : undefined,
    args: passthrough,
    startTimeoutMs,
    signal: ac.signal,
    onLog: (line: string) => io.err(`[llama-server] ${line}\n`),
    onStatus: (line: string) => io.err(`ollama-compat: ${line}\n`),
    onProgress: (e: { kind: string; written: number; total: number }) => {
      // on a terminal: the same bar as translate; otherwise a line every 10 %
      if (io.errTTY) {
        bar ??= progressBar(io, `caching ${e.kind}`);
        bar.update(e.written, e.total);
        if (e.written === e.total) {
          bar.done();
          bar = undefined;
        }
        return;
      }
      const pct = Math.floor((100 * e.written) / Math.max(1, e.total));
      if (pct >= lastPct + 10 || e.written === e.total) {
        lastPct = e.written === e.total ? -1 : pct;
        io.err(`ollama-compat: writing ${(e.written / 2 ** 20).toFixed(1)} / ${(e.total / 2 ** 20).toFixed(1)} MiB\n`);
      }
    },
  };
  try {
    server = opts.all ? await serveAll(common, modelsMax, opts.keepAlive) : await startServer({ ...common, model: model! });
    if (caught) await server.stop();
  } catch (e) {
    if (caught) {
      io.err(`ollama-compat: stopped (${e instanceof Error ? e.message.split("\n")[0] : String(e)})\n`);
      return SIGNAL_EXIT[caught] ?? 1;
    }
    if (e instanceof BridgeError && e.code === "SERVER_CRASHED") {
      throw new CliError("error", startFailureText(e, `ollama-compat serve ${opts.all ? "--all" : model}`));
    }
    throw e;
  } finally {
    if (!server) giveBack();
  }
  if (!caught) {
    io.err(opts.all ? `ollama-compat: Ollama API ready on ${server.url} (llama-server router, pid ${server.pid})\n` : `ollama-compat: llama-server (pid ${server.pid}) ready\n`);
    io.out(`${server.url}\n`);
  }
  const exit: ExitInfo = await server.exited;
  giveBack();
  if (caught) return SIGNAL_EXIT[caught] ?? 1;
  const crash = crashCause(exit.signal);
  const why = crash ? `, ${crash.cause}${crash.workaround ? ` (run: ollama-compat serve ${opts.all ? "--all" : model} -- ${crash.workaround})` : ""}` : "";
  io.err(`ollama-compat: llama-server exited (${exit.code ?? exit.signal})${why}; last lines:\n${exit.lastLines.map((l) => `  ${l}`).join("\n")}\n`);
  return 1;
}

/** `serve --all`: Ollama's REST API (and /v1) on Ollama's address, in front of llama-server's router over the store. */
async function serveAll(common: Omit<ServeOllamaOptions, "models">, modelsMax: number | undefined, keepAlive: string | undefined) {
  const s = await serveOllama({ ...common, models: "all", modelsMax, keepAlive });
  return { pid: s.router.pid, url: s.url, exited: s.exited, stop: s.stop };
}

async function readApiKey(path: string): Promise<string> {
  let key: string;
  try {
    key = (await readFile(path, "utf8")).trim();
  } catch (e) {
    throw new CliError("usage", `--api-key-file ${path}: ${(e as Error).message}`);
  }
  if (key === "") throw new CliError("usage", `--api-key-file ${path}: the file is empty (expected the API key)`);
  return key;
}
