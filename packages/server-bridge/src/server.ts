import { cachePreparer, type ModelPreparer, type PrepareOptions, type PreparedModel } from "@compat/prepare";
import { ModelStore, type ResolvedModel } from "@compat/store";
import { modelArgs } from "./args";
import { canReadListeningPorts, checkPortFree, freePort, httpGet, LlamaChild, listeningPort, waitHealthy, type ExitInfo } from "./child";
import { BridgeError } from "./errors";
import { readKeyFile } from "./key-file";
import { findLlamaTool } from "./locate";

export interface LaunchOptions extends PrepareOptions {
  /** The store to resolve names in: a ModelStore or its root (default $OLLAMA_MODELS or ~/.ollama/models). */
  store?: ModelStore | string;
  /** Default 127.0.0.1: the bridge is local unless told otherwise. */
  host?: string;
  /**
   * Required to bind beyond loopback (unless `insecure`). Handed to llama-server through
   * its LLAMA_API_KEY environment variable, never on the command line other users can read.
   */
  apiKey?: string;
  /** Serve beyond loopback without an API key (anyone who reaches the port can use the model). */
  insecure?: boolean;
  /** Default: a free port. */
  port?: number;
  /** Path of llama-server (else $LLAMA_SERVER, PATH, the build cache). */
  llamaServer?: string;
  /** llama.cpp RPC workers (`host:port`), passed as --rpc. */
  rpc?: string[];
  /** Arguments passed to llama-server verbatim, after ours (so they win). */
  args?: string[];
  /** How long to wait for /health. Default 10 minutes (large models load slowly). */
  startTimeoutMs?: number;
  /** Every line llama-server prints. */
  onLog?(line: string): void;
  /**
   * Serve from this mount of the store instead of the translation cache: nothing is written, the
   * files are the mount's (a StoreMount; or serve's ServeMount, which mounts only for a model that
   * needs translating).
   */
  mount?: ModelPreparer;
}

/** How the models of a launch reach llama-server: the mount when given one, else the translation cache. */
export function preparerFor(opts: LaunchOptions): ModelPreparer {
  return opts.mount ?? cachePreparer(opts);
}

/**
 * Launch options once the pass-through arguments are applied, with the path llama-server serves
 * its routes under (--api-prefix) and a key it answers to (for RunningServer.get).
 */
type ResolvedLaunch = LaunchOptions & { urlPath?: string; requestKey?: string };

export interface StartServerOptions extends LaunchOptions {
  /** An Ollama reference (`gemma3:4b`), a GGUF path, or an already resolved model. */
  model: string | ResolvedModel;
}

export interface RunningServer {
  /** `http://127.0.0.1:PORT`: OpenAI-compatible (/v1/chat/completions, /v1/embeddings, /v1/models). */
  url: string;
  host: string;
  port: number;
  pid: number;
  /** The llama-server command line. */
  command: string[];
  /** Resolves when llama-server exits, for whatever reason. */
  exited: Promise<ExitInfo>;
  /** Stops llama-server: SIGTERM, then SIGKILL after `graceMs` (default 3 s). */
  stop(graceMs?: number): Promise<ExitInfo>;
  lastLines(n?: number): string[];
  /** A GET of one of its routes (`/models`), with a key it answers to when it has any: the status and body. */
  get(path: string, timeoutMs?: number): Promise<{ status: number; body: string }>;
}

export interface SingleServer extends RunningServer {
  model: PreparedModel;
}

export function asStore(store: ModelStore | string | undefined, env?: Record<string, string | undefined>): ModelStore {
  return store instanceof ModelStore ? store : new ModelStore(store, env);
}

/** Host, port, logging and RPC arguments shared by single-model and router launches. */
export function commonArgs(host: string, port: number, rpc: readonly string[] | undefined): string[] {
  const args = ["--host", host, "--port", String(port), "--no-webui", "--offline"];
  if (rpc && rpc.length > 0) args.push("--rpc", rpc.join(","));
  return args;
}

/** Runs llama-server with `args` on host:port and waits until it is healthy. */
export async function launch(
  args: string[],
  opts: LaunchOptions,
  what = "llama-server",
): Promise<RunningServer> {
  const env = opts.env ?? process.env;
  const command = findLlamaTool("llama-server", { explicit: opts.llamaServer, env });
  // Pass-through arguments that bind or guard the server are held to the same rules as our own
  // options (they would win over ours on llama-server's command line).
  const bind = bindingFromArgs(opts.args ?? [], { ...process.env, ...env });
  const host = bind.host ?? opts.host ?? "127.0.0.1";
  const apiKey = bind.apiKey ?? opts.apiKey;
  const keyed = hasKey(apiKey) || bind.keyFile !== undefined || hasKey({ ...process.env, ...env }.LLAMA_API_KEY);
  if (!isLoopback(host) && !keyed && !opts.insecure) {
    const setBy = bind.host !== undefined ? `the llama-server argument --host ${bind.host}` : undefined;
    throw new BridgeError("INSECURE_BIND", `refusing to serve on ${host}${setBy ? ` (from ${setBy})` : ""} without an API key: give one (apiKey, --api-key-file) or opt out with insecure`, {
      host,
      ...(setBy ? { setBy } : {}),
    });
  }
  const port = bind.port ?? opts.port;
  const requestKey = firstKey(apiKey) ?? (bind.keyFile !== undefined ? firstKey(readKeyFile(bind.keyFile, "--api-key-file").text, true) : undefined) ?? firstKey({ ...process.env, ...env }.LLAMA_API_KEY);
  const effective: ResolvedLaunch = { ...opts, host, port, args: bind.rest, ...(apiKey !== undefined ? { apiKey } : {}), urlPath: bind.prefix ?? "", ...(requestKey !== undefined ? { requestKey } : {}) };
  if (port) {
    await checkPortFree(host, port);
    return launchOn(host, port, command, args, effective, what);
  }
  // llama-server binds a port of the kernel's choosing (--port 0), and we read which from its
  // log or /proc: the port is bound by the process that uses it, so two launches at once cannot
  // meet on one port (a probe's port, closed and handed on, could be taken by another
  // llama-server, whose /health would then answer for ours).
  if (canReadListeningPorts) return launchOn(host, 0, command, args, effective, what);
  return launchOnProbedPort(host, command, args, effective, what);
}

/** What pass-through arguments say about where and how llama-server listens, and the arguments left to pass on. */
export interface PassThroughBinding {
  /** `--host`, `--port`, `--api-key`: taken out of the arguments and applied as our own options (the key then travels by environment, not argv). */
  host?: string;
  port?: number;
  apiKey?: string;
  /** `--api-key-file`, left in place: llama-server reads it; it holds at least one key. */
  keyFile?: string;
  /** `--api-prefix` (or LLAMA_ARG_API_PREFIX): every route, /health included, moves under it. */
  prefix?: string;
  rest: string[];
}

/**
 * Reads the arguments as llama.cpp does (`--api_key` is `--api-key`, the last of a repeated
 * flag wins, LLAMA_ARG_* in the environment first). A unix-socket host and TLS files are
 * refused: the bridge talks plain HTTP over TCP to llama-server (its health checks, the URL it
 * gives out).
 */
export function bindingFromArgs(args: readonly string[], env: Record<string, string | undefined> = {}): PassThroughBinding {
  const out: PassThroughBinding = { rest: [] };
  if (env.LLAMA_ARG_API_PREFIX) out.prefix = env.LLAMA_ARG_API_PREFIX;
  let tls = env.LLAMA_ARG_SSL_KEY_FILE || env.LLAMA_ARG_SSL_CERT_FILE ? "LLAMA_ARG_SSL_*" : undefined;
  if (env.LLAMA_ARG_API_KEY_FILE) out.keyFile = checkedKeyFile(env.LLAMA_ARG_API_KEY_FILE, "LLAMA_ARG_API_KEY_FILE");
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const flag = arg.startsWith("--") ? arg.replace(/_/g, "-") : arg;
    const value = (): string => {
      const v = args[i + 1];
      if (v === undefined) throw new BridgeError("BAD_ARGUMENT", `llama-server argument ${arg} needs a value`, { arg });
      i++;
      return v;
    };
    switch (flag) {
      case "--host":
        out.host = value();
        if (out.host.endsWith(".sock")) throw new BridgeError("BAD_ARGUMENT", `--host ${out.host}: a unix socket; the bridge serves over TCP (give an address)`, { arg: out.host });
        continue;
      case "--port": {
        const v = value();
        const port = Number(v);
        if (!/^\d+$/.test(v) || port > 65535) throw new BridgeError("BAD_ARGUMENT", `--port ${v}: not a port number`, { arg: v });
        out.port = port;
        continue;
      }
      case "--api-key":
        out.apiKey = value();
        continue;
      case "--api-key-file": {
        const file = value();
        out.keyFile = checkedKeyFile(file, "--api-key-file");
        out.rest.push(arg, file);
        continue;
      }
      case "--api-prefix":
        out.prefix = value();
        out.rest.push(arg, out.prefix);
        continue;
      case "--ssl-key-file":
      case "--ssl-cert-file":
        tls = flag;
        break;
    }
    out.rest.push(arg);
  }
  if (tls) throw new BridgeError("BAD_ARGUMENT", `${tls}: TLS is not supported; the bridge talks plain HTTP to llama-server (put a TLS proxy in front of it)`, { arg: tls });
  return out;
}

/** A key file as llama.cpp reads it (one key a line, `#` comments): it must give at least one key, or the server would be open. */
function checkedKeyFile(path: string, from: string): string {
  const { text } = readKeyFile(path, from);
  if (!text.split(/\r?\n/).some((l) => l !== "" && !l.startsWith("#"))) {
    throw new BridgeError("BAD_ARGUMENT", `${from} ${path}: holds no key (expected one key a line)`, { arg: path });
  }
  return path;
}

/** llama.cpp splits a key list at commas and drops empty items. */
function hasKey(keys: string | undefined): boolean {
  return keys !== undefined && keys.split(",").some((k) => k.trim() !== "");
}

/** The first key llama.cpp takes from a list: `--api-key` (LLAMA_API_KEY) split at commas; a key file (`lines`) one a line, `#` lines comments. */
function firstKey(keys: string | undefined, lines = false): string | undefined {
  return keys?.split(lines ? "\n" : ",").find((k) => k !== "" && !(lines && k.startsWith("#")));
}

/**
 * Where /proc cannot tell a child's port: a port the OS just handed out, which another process
 * can take before llama-server binds it; then pick another and try again.
 */
export async function launchOnProbedPort(host: string, command: string, args: string[], opts: ResolvedLaunch, what = "llama-server"): Promise<RunningServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await launchOn(host, await freePort(host), command, args, opts, what);
    } catch (e) {
      if (!(e instanceof BridgeError && e.code === "PORT_IN_USE") || attempt >= PORT_ATTEMPTS) throw e;
    }
  }
}

/**
 * llama.cpp's log can be lost, whole or from some line on, when it exits at once (its logger is
 * not flushed at exit): a port taken under llama-server may show as an exit with no output or
 * with only its first lines (seen under load: the parameters line, then nothing). If the port is
 * held by another process now (the exited llama-server holds nothing), that is PORT_IN_USE, which
 * an automatic launch retries; else the error as it was.
 */
async function silentBindFailure(e: unknown, host: string, port: number, what: string): Promise<unknown> {
  if (!(e instanceof BridgeError) || e.code !== "SERVER_START_FAILED") return e;
  try {
    await checkPortFree(host, port);
    return e;
  } catch (taken) {
    if (!(taken instanceof BridgeError)) return e;
    return new BridgeError("PORT_IN_USE", `${what} exited before it was ready, and port ${port} on ${host} is held by another process`, { ...e.details, host, port });
  }
}

/** How many free ports an automatic launch tries before giving up. */
const PORT_ATTEMPTS = 5;

async function launchOn(
  host: string,
  port: number,
  command: string,
  args: string[],
  opts: ResolvedLaunch,
  what: string,
): Promise<RunningServer> {
  const env = opts.env ?? process.env;
  const full = [...commonArgs(host, port, opts.rpc), ...args, ...(opts.args ?? [])];
  const childEnv = { ...process.env, ...env, ...(opts.apiKey ? { LLAMA_API_KEY: opts.apiKey } : {}) };
  const child = new LlamaChild({ command, args: full, env: childEnv, onLog: opts.onLog });
  // the address it really listens on: 0.0.0.0 is every interface, and the URL says so
  const urlHost = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  const onAbort = () => void child.stop();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  // an abort before the listener was added fires no event: the child goes at once
  if (opts.signal?.aborted) onAbort();
  const timeoutMs = opts.startTimeoutMs ?? 10 * 60_000;
  const path = (opts.urlPath ?? "").replace(/\/+$/, "");
  let url = `http://${urlHost}:${port}${path}`;
  try {
    if (port === 0) {
      port = await boundPort(child, timeoutMs, what);
      url = `http://${urlHost}:${port}${path}`;
    }
    await waitHealthy(child, url, timeoutMs, what);
  } catch (e) {
    await child.stop();
    throw await silentBindFailure(e, host, port, what);
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
  return {
    url,
    host,
    port,
    pid: child.pid!,
    command: [command, ...full],
    exited: child.exited,
    stop: (graceMs) => child.stop(graceMs),
    lastLines: (n) => child.lastLines(n),
    get: (route, getTimeoutMs = 30_000) => httpGet(`${url}${route}`, getTimeoutMs, opts.requestKey),
  };
}

/**
 * The port a child started with --port 0 listens on, once it does (llama-server binds before
 * it loads the model). If it exits first, waitHealthy reports why.
 */
async function boundPort(child: LlamaChild, timeoutMs: number, what: string): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let askProc = true;
  while (child.running) {
    // What it printed once bound ("listening on ..."), looked at on each line it prints; /proc,
    // which takes milliseconds to ask once it has a socket, only at each tick, for a log turned
    // down or off: asked at every line, it was asked between the bind and the line saying so.
    const port = child.announcedPort ?? (askProc ? await listeningPort(child.pid!) : undefined);
    if (port !== undefined) return port;
    if (Date.now() > deadline) {
      const lines = child.lastLines();
      throw new BridgeError("SERVER_START_TIMEOUT", `${what} did not listen on a port after ${timeoutMs} ms:\n${lines.join("\n")}`, { lastLines: lines });
    }
    askProc = await Promise.race([new Promise<boolean>((r) => setTimeout(() => r(true), 25)), child.exited.then(() => false), child.nextLine().then(() => false)]);
  }
  // it exited: waitHealthy turns that into the right error
  await waitHealthy(child, "http://127.0.0.1:0", timeoutMs, what);
  throw new BridgeError("SERVER_START_FAILED", `${what} exited before it listened`);
}

/**
 * Serves one model: resolve it (store name or GGUF path), translate what needs it into the
 * cache, and run llama-server on the result with the arguments Ollama would use.
 */
export async function startServer(opts: StartServerOptions): Promise<SingleServer> {
  const env = opts.env ?? process.env;
  const resolved = typeof opts.model === "string" ? await asStore(opts.store, env).resolve(opts.model) : opts.model;
  // Fail before translating anything when llama-server is not there.
  findLlamaTool("llama-server", { explicit: opts.llamaServer, env });
  const preparer = preparerFor(opts);
  const model = await preparer.prepare(resolved);
  // a mount that plans a model on first use: its files are there before llama-server opens them
  await preparer.ready?.(resolved);
  if (opts.signal?.aborted) throw new BridgeError("TRANSLATION_ABORTED", "stopped before llama-server started");
  const server = await launch([...modelArgs(model), "--alias", resolved.name], opts);
  return { ...server, model };
}

/** 127.0.0.0/8, ::1 and localhost: addresses only this machine reaches. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host);
}
