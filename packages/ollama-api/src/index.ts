import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import { asStore, BridgeError, findLlamaTool, isLoopback, preparerFor, presetSection, startRouter, withoutStopWords, type ExitInfo, type RouterModel, type RouterServer, type StartRouterOptions } from "@compat/server-bridge";
import { allowedOrigins, checkAccess, originMatchers } from "./access";
import { parseKeepAlive } from "./duration";
import { LoadConfigs } from "./load-config";
import { apiModel, type ApiModel } from "./models";
import { answerWhileStarting, OllamaRoutes } from "./routes";
import { InstanceLog } from "./instance-log";
import { ModelScheduler, RouterModels } from "./scheduler";
import { Upstream } from "./upstream";

export { OLLAMA_API_VERSION } from "./routes";

/** Ollama's default address. */
export const OLLAMA_DEFAULT_PORT = 11434;

/**
 * Where the API listens when not told: OLLAMA_HOST as Ollama reads it (envconfig.Host: `host`,
 * `host:port`, `[::1]:port`, `http://host[:port]`; no port: 11434, or 80/443 after a scheme),
 * default 127.0.0.1:11434. An empty host (`:8080`) stays on loopback here (Ollama would listen
 * on every interface; beyond loopback needs an API key).
 */
export function ollamaAddress(env: Record<string, string | undefined> = process.env): { host: string; port: number } {
  const s = (env.OLLAMA_HOST ?? "").trim();
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(s)?.[1]?.toLowerCase();
  const fallback = scheme === "https" ? 443 : scheme === "http" ? 80 : OLLAMA_DEFAULT_PORT;
  const hostport = (scheme ? s.slice(scheme.length + 3) : s).split("/")[0]!;
  const m = /^(?:\[([^\]]*)\]|([^:[\]]*)):(\d+)$/.exec(hostport);
  const port = m ? Number(m[3]) : fallback;
  const host = (m ? (m[1] ?? m[2]) : hostport.replace(/^\[|\]$/g, "")) || "127.0.0.1";
  return { host, port: port <= 65535 ? port : fallback };
}

export interface ServeOllamaOptions extends Omit<StartRouterOptions, "modelsMax"> {
  /** Models loaded at once (default $OLLAMA_MAX_LOADED_MODELS, else 4, llama-server's own default); 0: no limit. */
  modelsMax?: number;
  /** How long an idle model stays loaded: a number of seconds or a duration (default $OLLAMA_KEEP_ALIVE, else "5m"). */
  keepAlive?: string | number;
  /** Largest request body accepted (default 256 MiB: images travel base64 inside JSON). */
  maxBodyBytes?: number;
  /**
   * Request-body bytes held at once across all connections (default 512 MiB, at least
   * maxBodyBytes): a request that would go beyond it is refused with 503.
   */
  maxHeldBodyBytes?: number;
  /**
   * Called once the API listens, with its URL: from then on `/` and /api/version answer, and every
   * other request is held until the router is ready (then served), or closed if the start fails.
   */
  onListening?(url: string): void;
}

export interface OllamaServer {
  /** `http://HOST:PORT`: Ollama's API (/api/*) and the OpenAI routes (/v1/*). */
  url: string;
  host: string;
  port: number;
  /** The llama-server router behind it. */
  router: RouterServer;
  /** The key the router answers to (`Authorization: Bearer KEY`), made at start, for a caller that asks the router itself; never printed. */
  routerKey: string;
  models: RouterModel[];
  /** Resolves when the router exits (the API stops with it). */
  exited: Promise<ExitInfo>;
  /** Request-body bytes the API holds now, across all connections (never above maxHeldBodyBytes). */
  heldBodyBytes(): number;
  stop(graceMs?: number): Promise<ExitInfo>;
}

/**
 * Ollama's REST API on Ollama's address, in front of a llama-server router over the store:
 * what an Ollama user's clients call, answered by stock llama-server. The router listens on a
 * private loopback port; this API is the only way in, so model loads are decided by one
 * scheduler (see ModelScheduler) and names are Ollama's on every route. The router and the
 * model instances it starts answer only requests that carry a key this process made up
 * (web pages and other local users get 401), and allow no other origin (see ROUTER_CORS).
 */
export async function serveOllama(opts: ServeOllamaOptions): Promise<OllamaServer> {
  const env = opts.env ?? process.env;
  const address = ollamaAddress(env);
  const host = opts.host ?? address.host;
  const port = opts.port ?? address.port;
  if (!isLoopback(host) && !opts.apiKey && !opts.insecure) {
    throw new BridgeError("INSECURE_BIND", `refusing to serve on ${host} without an API key: give one (apiKey, --api-key-file) or opt out with insecure`, { host });
  }
  const modelsMax = opts.modelsMax ?? (env.OLLAMA_MAX_LOADED_MODELS ? Number(env.OLLAMA_MAX_LOADED_MODELS) : 4);
  if (!Number.isInteger(modelsMax) || modelsMax < 0) throw new BridgeError("INVALID_OPTION", `models-max ${modelsMax}: expected a whole number (0: no limit)`, { modelsMax });
  const keepAliveMs = parseKeepAliveOption(opts.keepAlive ?? env.OLLAMA_KEEP_ALIVE ?? "5m");
  const maxQueue = env.OLLAMA_MAX_QUEUE ? Number(env.OLLAMA_MAX_QUEUE) : 512;
  if (!Number.isInteger(maxQueue) || maxQueue < 1) throw new BridgeError("INVALID_OPTION", `OLLAMA_MAX_QUEUE ${env.OLLAMA_MAX_QUEUE}: expected a whole number above 0`, { maxQueue });

  const args = routerArgs(opts.args ?? []);
  // before the API answers (onListening): a missing llama-server fails the start, not a server already announced
  findLlamaTool("llama-server", { explicit: opts.llamaServer, env });

  // The API listens first, as Ollama does: a taken address fails before anything is translated,
  // and the listener is set up while the store is read and the router starts rather than after.
  // Requests pass the access checks at once; `/` and /api/version answer (Ollama's clients poll
  // them to see a server is up), the others wait for the routes, which need the router, and are
  // served once it is ready. So the API is announced (onListening) as soon as it listens: a
  // client's first call answers then, and its next ones wait. A start that fails closes it.
  let routes: OllamaRoutes | undefined;
  let routesReady!: (r: OllamaRoutes | undefined) => void;
  const whenRoutes = new Promise<OllamaRoutes | undefined>((r) => (routesReady = r));
  const access = { origins: allowedOrigins(env), listenHost: host, apiKey: opts.apiKey };
  const matchers = originMatchers(access.origins);
  const http = createServer({ noDelay: true, keepAliveTimeout: 65_000 }, (req, res) => {
    if (checkAccess(req, res, access, matchers) !== "next") return;
    if (routes !== undefined) void routes.handle(req, res);
    else
      void answerWhileStarting(req, res).then(async (answered) => {
        if (answered) return;
        const r = await whenRoutes;
        if (r !== undefined) return r.handle(req, res);
        res.destroy();
      });
  });
  await listen(http, host, port);
  const bound = http.address();
  const boundPort = typeof bound === "object" && bound ? bound.port : port;
  // the address it really listens on, as startServer prints it: 0.0.0.0 is every interface
  const urlHost = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  const url = `http://${urlHost}:${boundPort}`;
  opts.onListening?.(url);
  const closeApi = () => {
    routesReady(undefined);
    http.closeAllConnections();
    http.close();
  };
  const instances = new InstanceLog();
  const preparer = preparerFor(opts);
  // the router looks at every projector as it starts (and on each reload); one of a model
  // planned on first use is not there yet: that is expected, not an error to show
  let afterMissing = false;
  const onLog = (line: string) => {
    const missing = /(?:failed to open GGUF file|failed to get capabilities from file) '([^']+)'/.exec(line);
    if (missing && preparer.notYetPlanned?.(missing[1]!)) {
      afterMissing = true;
      return;
    }
    const blankAfter = afterMissing && line.trim() === "";
    afterMissing = false;
    if (blankAfter) return;
    instances.onLog(line);
    opts.onLog?.(line);
  };
  // the key travels to llama-server by environment (LLAMA_API_KEY), which the router's model
  // instances inherit: they check it too (the router passes the Authorization header on)
  const routerKey = randomBytes(32).toString("base64url");
  let router: Awaited<ReturnType<typeof startRouter>>;
  try {
    router = await startRouter({ ...opts, args, onLog, host: "127.0.0.1", port: undefined, apiKey: routerKey, insecure: false, modelsMax: 0, stopWordsPerRequest: true });
  } catch (e) {
    closeApi();
    throw e;
  }
  const upstream = new Upstream(router.url, routerKey);
  const configs = new LoadConfigs(router.presetPath, upstream);
  // a model planned on first use (the mount's recorded facts) is planned before its instance opens its files
  const readyOf = (p: NonNullable<RouterModel["model"]>) => async () => preparer.ready?.(p.resolved);
  const io = new RouterModels(upstream, {
    define: async (c, keep) => {
      await served.find((m) => c.routerName === m.name || c.routerName.startsWith(`${m.name}~`))?.ready();
      await configs.define(c, keep);
    },
    errorOf: (n) => instances.errorOf(n),
  });
  const scheduler = new ModelScheduler(io, { maxLoaded: modelsMax, keepAliveMs, maxQueue, onStatus: opts.onStatus });
  const served: ApiModel[] = router.models.filter((m) => m.model).map((m) => apiModel(m.name, m.model!, readyOf(m.model!)));
  const store = asStore(opts.store, env);
  // a model pulled while serving: prepared as the others were, then a section of the router's preset
  const addModel = async (name: string): Promise<ApiModel> => {
    const resolved = await store.resolve(name);
    const prepared = await preparer.prepare(resolved);
    await configs.addModel(resolved.name, presetSection(resolved.name, withoutStopWords(prepared), (m) => opts.onStatus?.(`warning: ${m}`)), prepared);
    return apiModel(resolved.name, prepared, readyOf(prepared));
  };
  const maxBodyBytes = opts.maxBodyBytes ?? 256 * 2 ** 20;
  const maxHeldBodyBytes = opts.maxHeldBodyBytes ?? Math.max(512 * 2 ** 20, maxBodyBytes);
  routes = new OllamaRoutes({ models: served, scheduler, configs, upstream, instances, storeRoot: store.root, maxBodyBytes, maxHeldBodyBytes, addModel, env });
  routesReady(routes);
  const shutdown = () => {
    scheduler.close();
    upstream.close();
    http.closeAllConnections();
    http.close();
  };
  void router.exited.then(shutdown);
  return {
    url,
    host,
    port: boundPort,
    router,
    routerKey,
    models: router.models,
    exited: router.exited,
    heldBodyBytes: () => routes.heldBodyBytes(),
    stop: async (graceMs) => {
      shutdown();
      return router.stop(graceMs);
    },
  };
}

/**
 * CORS on the router and its model instances: one allowed origin that no page can have (.invalid
 * never resolves, RFC 6761) and no credentials, so a browser lets no page read an answer.
 * llama-server's default is `*` with credentials, which echoes any Origin.
 */
const ROUTER_CORS = ["--cors-origins", "http://ollama-compat-router.invalid", "--no-cors-credentials"];

/** llama-server arguments that would move the router, unlock it or open it to pages: the API decides those. */
const ROUTER_OWN = new Set(["--host", "--port", "--api-key", "--api-key-file", "--api-prefix", "--cors-origins", "--cors-credentials", "--no-cors-credentials", "--cors-methods", "--cors-headers"]);

/** The router's arguments: ROUTER_CORS, then the pass-through ones (none of ROUTER_OWN, so nothing undoes it). */
function routerArgs(args: readonly string[]): string[] {
  for (const a of args) {
    if (!ROUTER_OWN.has(a.startsWith("--") ? a.replace(/_/g, "-") : a)) continue;
    throw new BridgeError("BAD_ARGUMENT", `llama-server argument ${a}: the Ollama API's router listens on a private loopback port with a key of its own; give the API's address with --host/--port (OLLAMA_HOST) and its key with --api-key-file`, { arg: a });
  }
  return [...ROUTER_CORS, ...args];
}

function parseKeepAliveOption(v: string | number): number {
  try {
    return parseKeepAlive(v) ?? 5 * 60_000;
  } catch {
    throw new BridgeError("INVALID_OPTION", `keep-alive ${JSON.stringify(v)}: expected seconds or a duration such as "5m" (negative: forever)`, { keepAlive: v });
  }
}

function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", (e: NodeJS.ErrnoException) =>
      reject(e.code === "EADDRINUSE" ? new BridgeError("PORT_IN_USE", `port ${port} on ${host} is already in use (is Ollama still running? stop it first)`, { host, port }) : e),
    );
    server.listen(port, host, () => resolve());
  });
}
