import type { TranslationProfile } from "@compat/handlers";
import { ollamaAddress, serveOllama, type ServeOllamaOptions } from "@compat/ollama-api";
import { cachePreparer, ServeMount, type PrepareOptions } from "@compat/prepare";
import { apiKeyOf, bindingFromArgs, BridgeError, crashCause, isLoopback, readKeyFile, startServer, type ExitInfo } from "@compat/server-bridge";
import { fetchRefusesPort, ModelStore } from "@compat/store";
import { CliError } from "../errors";
import type { CliIo } from "../io";
import { notReadyText, startFailureText } from "../llama-check";
import { cacheProgress } from "../progress";
import { terminalSafe } from "../terminal";
import { bridgeEnv, commandCache } from "./cache-dir";

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
  /** false (--no-mount): serve from the translation cache even where a mount could be used. */
  mount?: boolean;
}

const SIGNAL_EXIT: Record<string, number> = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129 };
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * While serving, the signals are ours alone: a handler that exits at once (the binary's
 * temp-file cleanup) would orphan llama-server. We stop llama-server, or abort the cache
 * write (which removes its own staging files), then return the signal's exit code.
 * Returns a function that gives the signals back.
 */
export function takeSignals(onSignal: (sig: NodeJS.Signals) => void): () => void {
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
 * (stdout) once it answers (one model: llama-server is healthy; --all: Ollama's API listens,
 * and what needs the router waits for it; stderr says "ready" once it is), streams
 * llama-server's log prefixed on stderr, and stops it on SIGINT/SIGTERM. `passthrough` is what
 * came after `--` (and any words after MODEL). Returns the exit code.
 */
export async function serveCommand(model: string | undefined, passthrough: string[], opts: ServeFlags, io: CliIo): Promise<number> {
  if (opts.all && model !== undefined) {
    throw new CliError("usage", `--all serves every installed model, and ${model} names one: give MODEL or --all, not both (llama-server arguments go after --)`);
  }
  if (!opts.all && model === undefined) throw new CliError("usage", "serve needs a MODEL (or --all)");
  const port = opts.port === undefined ? undefined : Number(opts.port);
  if (port !== undefined && (!/^\d+$/.test(opts.port!) || port > 65535)) throw new CliError("usage", `--port ${opts.port}: not a port number (0-65535)`);
  const startTimeout = opts.startTimeout === undefined ? undefined : Number(opts.startTimeout);
  if (startTimeout !== undefined && !(startTimeout > 0)) throw new CliError("usage", `--start-timeout ${opts.startTimeout}: expected a number of seconds above 0`);
  // where it will listen: serve --all on Ollama's address (OLLAMA_HOST) unless told, one model on loopback
  // (llama-server arguments after -- that bind or guard the server win over ours, as the bridge applies them)
  const ollama = opts.all ? ollamaAddress(io.env) : undefined;
  const passed = bindingFromArgs(passthrough, io.env);
  const host = passed.host ?? opts.host ?? ollama?.host ?? "127.0.0.1";
  const hostFlag =
    passed.host !== undefined
      ? `the llama-server argument --host ${passed.host}`
      : opts.host !== undefined || ollama === undefined
        ? `--host ${host}`
        : `OLLAMA_HOST=${io.env.OLLAMA_HOST ?? ""}`;
  // the key travels by file or environment, never as an argument other users can read
  const apiKey = opts.apiKeyFile !== undefined ? readApiKey(opts.apiKeyFile, io) : io.env.LLAMA_API_KEY || undefined;
  const keyed = apiKey !== undefined || passed.apiKey !== undefined || passed.keyFile !== undefined;
  // before any translation: a refusal after an hour of writing helps nobody
  if (!isLoopback(host) && !keyed && !opts.insecure) throw insecureBind(host, hostFlag);
  const what = `ollama-compat serve ${opts.all ? "--all" : model}`;
  const listenPort = port ?? ollama?.port;
  if (listenPort !== undefined && fetchRefusesPort(listenPort)) {
    const flag = port !== undefined ? `--port ${port}` : `port ${listenPort} (OLLAMA_HOST)`;
    io.err(`ollama-compat: warning: ${flag} is one of the ports browsers and fetch() refuse (the Fetch standard's bad ports), so web pages and clients built on fetch, such as the openai npm package, cannot reach it; curl can\n`);
  }

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

  const env = bridgeEnv(io.env, opts.cacheDir);
  const cache = { cache: commandCache(env, opts.profile), env, signal: ac.signal, onProgress: cacheProgress(io), onStatus: (line: string) => io.err(`ollama-compat: ${terminalSafe(line)}\n`) };
  const store = new ModelStore(opts.models, io.env);
  const files = serveFiles(store, opts.all ? "all" : model!, opts, io, cache);
  const common = {
    store,
    ...(files.mount ? { mount: files.mount } : {}),
    ...cache,
    // serve --all answers on Ollama's address (OLLAMA_HOST) unless told; one model on loopback
    host: opts.host ?? (opts.all ? undefined : "127.0.0.1"),
    apiKey,
    insecure: opts.insecure === true,
    port,
    llamaServer: opts.llamaServer,
    rpc: opts.rpc ? opts.rpc.split(",").map((s) => s.trim()).filter(Boolean) : undefined,
    args: passthrough,
    startTimeoutMs: startTimeout === undefined ? undefined : startTimeout * 1000,
    // llama.cpp logs the model's metadata (general.name, …): a line of it is the file's text
    onLog: (line: string) => io.err(`[llama-server] ${terminalSafe(line)}\n`),
  };
  try {
    // --all: the URL as soon as the API answers (Ollama's clients ask /api/version first); its other routes wait for the router
    server = opts.all ? await serveAll(common, modelsMax, opts.keepAlive, (url) => io.out(`${url}\n`)) : await startServer({ ...common, model: model! });
    if (caught) await server.stop();
  } catch (e) {
    if (caught) {
      io.err(`ollama-compat: stopped (${e instanceof Error ? e.message.split("\n")[0] : String(e)})\n`);
      return SIGNAL_EXIT[caught] ?? 1;
    }
    throw serveFailure(e, host, hostFlag, what);
  } finally {
    if (!server) {
      await files.close();
      giveBack();
    }
  }
  if (!caught) {
    const note = await files.note();
    if (note) io.err(`ollama-compat: ${note}\n`);
    io.err(opts.all ? `ollama-compat: Ollama API ready on ${server.url} (llama-server router, pid ${server.pid})\n` : `ollama-compat: llama-server (pid ${server.pid}) ready\n`);
    if (!opts.all) io.out(`${server.url}\n`);
  }
  const exit: ExitInfo = await server.exited;
  await files.close();
  giveBack();
  if (caught) return SIGNAL_EXIT[caught] ?? 1;
  const crash = crashCause(exit.signal);
  const why = crash ? `, ${crash.cause}${crash.workaround ? ` (run: ${what} -- ${crash.workaround})` : ""}` : "";
  io.err(`ollama-compat: llama-server exited (${exit.code ?? exit.signal})${why}; last lines:\n${exit.lastLines.map((l) => `  ${terminalSafe(l)}`).join("\n")}\n`);
  return 1;
}

/** INSECURE_BIND in the words of the command line: what set the address (`--host X`, `OLLAMA_HOST=…`) and the flags that lift the rule, not the API's fields. */
function insecureBind(host: string, setBy: string): BridgeError {
  return new BridgeError(
    "INSECURE_BIND",
    `refusing to serve on ${host} without an API key (${setBy}): anyone who reaches it could use the model; give a key with --api-key-file FILE (or LLAMA_API_KEY), serve on loopback, or pass --insecure`,
    { host },
  );
}

/**
 * A start that failed, as one line the user can act on: a crash with its cause and
 * workaround, llama.cpp's own error line when llama-server exited before it was ready
 * (the bridge's message has it on the lines after the first, which the CLI does not print).
 */
function serveFailure(e: unknown, host: string, hostFlag: string, what: string): unknown {
  if (!(e instanceof BridgeError)) return e;
  switch (e.code) {
    case "SERVER_CRASHED":
      return new CliError("error", startFailureText(e, what));
    case "INSECURE_BIND":
      return insecureBind((e.details.host as string | undefined) ?? host, (e.details.setBy as string | undefined) ?? hostFlag);
    case "SERVER_START_FAILED":
    case "SERVER_START_TIMEOUT":
      return new BridgeError(e.code, notReadyText(e, what), e.details);
    default:
      return e;
  }
}

/** `serve --all`: Ollama's REST API (and /v1) on Ollama's address, in front of llama-server's router over the store. */
async function serveAll(common: Omit<ServeOllamaOptions, "models">, modelsMax: number | undefined, keepAlive: string | undefined, onListening: (url: string) => void) {
  const s = await serveOllama({ ...common, models: "all", modelsMax, keepAlive, onListening });
  return { pid: s.router.pid, url: s.url, exited: s.exited, stop: s.stop };
}

/**
 * Where llama-server reads the models from. A native model (every model of a migrated store) is
 * served from its blobs as they are. The first model that needs translating mounts the store
 * privately (nothing written, the router starts at once) where FUSE is usable, else goes to the
 * translation cache, with the reason in one line. --no-mount asks for the cache. The mount's
 * sidecars sit beside the translation cache of `env` (so under --cache-dir). The `note` is
 * printed once the server is ready: a start that fails is one line, its error.
 */
function serveFiles(store: ModelStore, models: string, opts: ServeFlags, io: CliIo, cache: PrepareOptions): { mount?: ServeMount; note(): Promise<string | undefined>; close(): Promise<void> } {
  if (opts.mount === false) return { note: async () => undefined, close: async () => undefined };
  const all = models === "all";
  const mount = new ServeMount({
    store,
    models: all ? "all" : [models],
    ...(opts.profile ? { profile: opts.profile } : {}),
    env: cache.env,
    fallback: cachePreparer(cache),
    // at once: it says why translating comes next
    onNoMount: (reason) => io.err(`ollama-compat: not mounting (${terminalSafe(reason)}); serving from the translation cache\n`),
    // the daemon's warnings; which models of the store are left out (one model's failure is serve's error)
    onStatus: (line) => {
      if (line.startsWith("mount: ") || (all && line.includes("not mounted"))) io.err(`ollama-compat: ${terminalSafe(line)}\n`);
    },
  });
  return {
    mount,
    async note() {
      const m = await mount.mounted();
      if (m) return `serving from a mount of the store (${m.dir}): nothing is translated up front, no copy is written`;
      if (!mount.needed) return `${all ? "every model is" : `${models} is`} native: llama-server reads the store's blobs as they are, nothing mounted or translated`;
      return undefined;
    },
    close: () => mount.close(),
  };
}

/**
 * The key of --api-key-file (see readKeyFile and apiKeyOf: a regular file, one line), and a
 * warning when other users may read it, as ssh gives for a private key.
 */
function readApiKey(path: string, io: CliIo): string {
  try {
    const file = readKeyFile(path, "--api-key-file");
    const key = apiKeyOf(file, path, "--api-key-file");
    if (file.tooOpen) {
      const mode = file.mode.toString(8).padStart(4, "0");
      io.err(`ollama-compat: warning: --api-key-file ${terminalSafe(path)} has permissions ${mode}: other users can read or change the API key (chmod 600 ${terminalSafe(path)})\n`);
    }
    return key;
  } catch (e) {
    throw e instanceof BridgeError ? new CliError("usage", e.message) : e;
  }
}
