import type { IncomingMessage, ServerResponse } from "node:http";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { blobFileName, canonicalDigest, copyModel, deleteModel, displayName, parseModelName, pullModel, StoreError, type PullProgress } from "@compat/store";
import { BodyBudget, discard, jsonBody, parseJson, readUpTo } from "./body";
import { chatRequest, generateRequest, isHousekeeping } from "./chat";
import { embed, embeddings } from "./embed";
import type { LoadConfigs, LoadWant } from "./load-config";
import { ApiError, badRequest, modelNotFound } from "./errors";
import { modelfileText, parametersText, tensorList, type ApiModel } from "./models";
import { stopWords } from "./options";
import { modelRenamer } from "./stream";
import { answer, sendError, sendJson } from "./respond";
import type { Lease, ModelScheduler } from "./scheduler";
import type { Upstream } from "./upstream";
import type { InstanceLog } from "./instance-log";

/** The Ollama release whose API this implements (what /api/version says; clients check minimums). */
export const OLLAMA_API_VERSION = "0.32.15";

const STORE_READ_ONLY =
  "ollama-compat serve --all cannot create or push models yet: do it with the ollama command, then restart ollama-compat serve --all";

type Json = Record<string, unknown>;

export interface RoutesOptions {
  models: ApiModel[];
  scheduler: ModelScheduler;
  configs: LoadConfigs;
  upstream: Upstream;
  /** What each model instance said about itself (its memory, for /api/ps). */
  instances?: InstanceLog;
  /** The store's root (HEAD /api/blobs/:digest looks there). */
  storeRoot: string;
  /** Largest request body accepted (bytes). */
  maxBodyBytes: number;
  /** Request-body bytes held at once across all requests (see BodyBudget). */
  maxHeldBodyBytes: number;
  /** Makes a model just written to the store servable (prepared, in the router's preset); /api/pull calls it. */
  addModel?: (name: string) => Promise<ApiModel>;
}

/**
 * Ollama's REST API (server/routes.go GenerateRoutes) over llama-server's router, and the
 * router's OpenAI routes (/v1/*) passed through with the same model names.
 */
export class OllamaRoutes {
  private readonly byName = new Map<string, ApiModel>();
  private readonly bodies: BodyBudget;

  constructor(private readonly o: RoutesOptions) {
    for (const m of o.models) this.byName.set(m.name.toLowerCase(), m);
    this.bodies = new BodyBudget(o.maxBodyBytes, o.maxHeldBodyBytes);
  }

  /** Request-body bytes held now, across all requests. */
  heldBodyBytes(): number {
    return this.bodies.held;
  }

  /** A model as a client names it: `gemma3` is `gemma3:latest`, full names and any case resolve too. */
  find(ref: unknown): ApiModel | undefined {
    if (typeof ref !== "string" || ref === "") return undefined;
    const n = parseModelName(ref);
    return n ? this.byName.get(displayName(n).toLowerCase()) : undefined;
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0]!;
    const method = req.method ?? "GET";
    try {
      if (path.startsWith("/v1/")) return await this.openAi(req, res, path);
      const route = ROUTES[path] ?? (path.startsWith("/api/blobs/") ? ROUTES["/api/blobs/:digest"] : undefined);
      if (!route) return void res.writeHead(404, { "content-type": "text/plain" }).end("404 page not found");
      const handler = route[method === "HEAD" && !route.HEAD ? "GET" : method];
      if (!handler) return void res.writeHead(405, { "content-type": "text/plain" }).end("405 method not allowed");
      await handler.call(this, req, res, path);
    } catch (e) {
      if (res.headersSent) res.destroy();
      else sendError(res, e);
    }
  }

  private async body(req: IncomingMessage, res: ServerResponse): Promise<Json> {
    return jsonBody((await this.bodies.read(req, res)).toString("utf8"));
  }

  /** The model a request body names (`model`, or the older `name`); 400 without one, 404 when it is not installed. */
  private model(body: Json): ApiModel {
    const ref = (body.model as unknown) || body.name;
    if (typeof ref !== "string" || ref === "") throw badRequest("model is required");
    const m = this.find(ref);
    if (!m) throw modelNotFound(ref);
    return m;
  }

  /** The load configuration a request's `options` need (num_ctx and the other load-time options). */
  private async want(m: ApiModel, options: unknown): Promise<LoadWant> {
    return this.o.configs.want(m, options, (await m.facts).contextLength);
  }

  async tags(_req: IncomingMessage, res: ServerResponse): Promise<void> {
    const models = await Promise.all(
      this.o.models.map(async (m) => {
        const f = await m.facts;
        return { name: m.name, model: m.name, modified_at: f.modifiedAt.toISOString(), size: f.size, digest: f.digest, details: f.details };
      }),
    );
    sendJson(res, 200, { models });
  }

  async show(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.body(req, res);
    const m = this.model(body);
    const f = await m.facts;
    const r = m.prepared.resolved;
    const out: Json = {
      modelfile: modelfileText(m.name, m.prepared),
      parameters: parametersText(r.params),
      template: f.template,
      ...(r.system !== undefined ? { system: r.system } : {}),
      details: f.details,
      model_info: f.modelInfo,
      capabilities: f.capabilities,
      modified_at: f.modifiedAt.toISOString(),
    };
    if (!out.parameters) delete out.parameters;
    if (body.verbose === true) Object.assign(out, await tensorList(m.prepared).then((t) => ({ model_info: t.info, tensors: t.tensors })));
    // Copilot Chat names a model by general.basename; Ollama answers it with the name it asked for
    if ((req.headers["user-agent"] ?? "").startsWith("GitHubCopilotChat/")) out.model_info = { ...(out.model_info as Json), "general.basename": body.model ?? body.name };
    sendJson(res, 200, out);
  }

  async ps(_req: IncomingMessage, res: ServerResponse): Promise<void> {
    const statuses = await this.o.upstream.statuses();
    const models = [];
    for (const m of this.o.models) {
      const config = this.o.scheduler.configOf(m.name) ?? (await this.want(m, undefined)).config;
      const s = statuses.get(config.routerName);
      if (s !== "loaded" && s !== "sleeping" && s !== "loading") continue;
      const f = await m.facts;
      const expires = this.o.scheduler.expiresAt(m.name) ?? Date.now();
      // what llama.cpp allocated, as it printed it; on a CPU nothing is in VRAM, and 0 is right
      const memory = this.o.instances?.memoryOf(config.routerName);
      models.push({
        name: m.name,
        model: m.name,
        size: memory?.total ?? f.size,
        digest: f.digest,
        details: f.details,
        expires_at: new Date(expires).toISOString(),
        size_vram: memory?.vram ?? 0,
        context_length: config.numCtx,
      });
    }
    models.sort((a, b) => b.expires_at.localeCompare(a.expires_at));
    sendJson(res, 200, { models });
  }

  /** POST /api/chat. */
  async chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.answerWith(req, res, chatRequest);
  }

  /** POST /api/generate. */
  async generate(req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.answerWith(req, res, generateRequest);
  }

  /** A generating request, built by `build` from the body (or a load/unload, which generates nothing). */
  private async answerWith(req: IncomingMessage, res: ServerResponse, build: typeof chatRequest): Promise<void> {
    const body = await this.body(req, res);
    const m = this.model(body);
    const r = await build(m, body);
    const want = await this.want(m, body.options);
    if (!isHousekeeping(r)) return answer(this.o.scheduler, this.o.upstream, res, r, want);
    if (r.kind === "render") return sendJson(res, 200, r.reply);
    if (r.kind === "unload") await this.o.scheduler.unload(m.name);
    else (await this.o.scheduler.acquire(m.name, want, r.keepAliveMs)).release();
    sendJson(res, 200, r.reply);
  }

  /** POST /api/embed. */
  async embed(req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.embedWith(req, res, embed);
  }

  /** POST /api/embeddings: the older single-prompt call. */
  async embeddings(req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.embedWith(req, res, embeddings);
  }

  private async embedWith(req: IncomingMessage, res: ServerResponse, run: typeof embed): Promise<void> {
    const body = await this.body(req, res);
    const m = this.model(body);
    // Ollama embeds with any model; one that is not an embedding model is loaded as one for it
    const f = await m.facts;
    const want = this.o.configs.want(m, body.options, f.contextLength, !f.capabilities.includes("embedding"));
    sendJson(res, 200, await run(this.o.scheduler, this.o.upstream, m, body, want));
  }

  /**
   * POST /api/pull: the model from its registry into the store (pullModel), Ollama's progress
   * objects streamed as NDJSON (`stream: false`: the last one alone), then served by the running
   * router. A failure after the stream began is a last `{"error": …}` line, as Ollama sends it.
   */
  async pull(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.body(req, res);
    const ref = typeof body.model === "string" && body.model !== "" ? body.model : body.name;
    if (typeof ref !== "string" || !parseModelName(ref)) throw badRequest("invalid model name");
    const stream = body.stream !== false;
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort(new Error("the client went away"));
    });
    const send = (p: PullProgress | { error: string }) => {
      if (!res.headersSent) res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.write(JSON.stringify(p) + "\n");
    };
    try {
      const pulled = await pullModel(ref, {
        root: this.o.storeRoot,
        insecure: body.insecure === true,
        signal: abort.signal,
        onProgress: (p) => {
          // "success" is said once the model is served too
          if (stream && p.status !== "success") send(p);
        },
      });
      const name = displayName(pulled.name);
      if (!this.find(name) && this.o.addModel) this.serve(await this.o.addModel(name));
      if (!stream) return sendJson(res, 200, { status: "success" });
      send({ status: "success" });
      res.end();
    } catch (e) {
      if (abort.signal.aborted) return;
      const message = e instanceof Error ? e.message : String(e);
      if (res.headersSent) {
        send({ error: message });
        res.end();
      } else sendJson(res, e instanceof ApiError ? e.status : 500, { error: message });
    }
  }

  /** POST /api/copy `{source, destination}`: the manifest under a second name (Ollama's CopyModel), served at once. */
  async copy(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.body(req, res);
    const source = typeof body.source === "string" ? parseModelName(body.source) : null;
    const destination = typeof body.destination === "string" ? parseModelName(body.destination) : null;
    if (!source || !destination) throw badRequest(`invalid model name: ${JSON.stringify(!source ? body.source : body.destination)}`);
    try {
      await copyModel(this.o.storeRoot, source, destination);
    } catch (e) {
      if (e instanceof StoreError && e.code === "UNKNOWN_MODEL") throw modelNotFound(String(body.source));
      throw e;
    }
    const name = displayName(destination);
    if (!this.find(name) && this.o.addModel) this.serve(await this.o.addModel(name));
    res.writeHead(200).end();
  }

  /**
   * DELETE /api/delete `{model}`: the manifest goes, and each of its blobs that no other manifest
   * names (Ollama's DeleteHandler); the model is unloaded and no longer listed.
   */
  async remove(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.body(req, res);
    const ref = typeof body.model === "string" && body.model !== "" ? body.model : body.name;
    const n = typeof ref === "string" ? parseModelName(ref) : null;
    if (!n) throw badRequest("invalid model name");
    try {
      await deleteModel(this.o.storeRoot, n);
    } catch (e) {
      if (e instanceof StoreError && e.code === "UNKNOWN_MODEL") throw modelNotFound(String(ref));
      throw e;
    }
    const m = this.find(displayName(n));
    if (m) {
      this.byName.delete(m.name.toLowerCase());
      this.o.models.splice(this.o.models.indexOf(m), 1);
      await this.o.scheduler.unload(m.name).catch(() => undefined);
    }
    res.writeHead(200).end();
  }

  /** Lists and serves a model added while running. */
  private serve(m: ApiModel): void {
    this.byName.set(m.name.toLowerCase(), m);
    this.o.models.push(m);
  }

  async readOnly(req: IncomingMessage, res: ServerResponse): Promise<void> {
    discard(req, res);
    sendJson(res, 403, { error: STORE_READ_ONLY });
  }

  /** HEAD /api/blobs/:digest: whether the store has the blob (what `ollama create` asks before an upload). */
  async headBlob(_req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const digest = decodedSegment(path.slice("/api/blobs/".length));
    if (canonicalDigest(digest) === undefined) throw badRequest(`invalid digest format: ${digest}`);
    res.writeHead(existsSync(join(this.o.storeRoot, "blobs", blobFileName(digest))) ? 200 : 404).end();
  }

  /**
   * /v1/*: Ollama's OpenAI and Anthropic routes. GET /v1/models[/:model] is answered here; the
   * routes of V1_ROUTES go on to llama-server's router, and nothing else does: the router also
   * serves admin routes (/models/load, /models/unload) that would bypass the scheduler. The path
   * is compared as it came, not decoded: each route has one spelling, and an escape, a dot
   * segment, a doubled or a back slash make another path, which is 404 here.
   */
  private async openAi(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if ((req.method === "GET" || req.method === "HEAD") && (path === "/v1/models" || path.startsWith("/v1/models/"))) return this.openAiModels(res, path);
    if (!V1_ROUTES.has(path)) return openAiError(res, 404, `no route ${path}`);
    if (req.method !== "POST") return openAiError(res, 405, "method not allowed");
    return this.passthrough(req, res, path);
  }

  /**
   * A route of V1_ROUTES, passed to llama-server with the model named as Ollama users name it,
   * loaded through the scheduler, and the model's stop words when a request gives none. What
   * llama-server is asked for is `path` itself (one of V1_ROUTES), not the request's URL.
   */
  private async passthrough(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    // bytes as they came (multipart uploads are not text); JSON bodies get Ollama's names
    let body: Buffer | undefined = await this.bodies.read(req, res);
    let lease: Lease | undefined;
    let leased: (() => Promise<Buffer>) | undefined;
    /** The model as the client named it, for the answer. */
    let asked: string | undefined;
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    // JSON bodies get Ollama's names, whatever content type the client gave them (fetch says text/plain)
    if (body && !/multipart|octet-stream|^audio|^image/.test(req.headers["content-type"] ?? "")) {
      let parsed: Json | undefined;
      try {
        const v = parseJson(body.toString("utf8"));
        if (typeof v === "object" && v !== null && !Array.isArray(v)) parsed = v as Json;
      } catch (e) {
        // what is not text (a lone surrogate) is refused here; llama-server answers the rest it cannot parse
        if (e instanceof ApiError) return openAiError(res, e.status, e.message);
      }
      if (parsed && typeof parsed.model === "string") {
        const m = this.find(parsed.model);
        if (!m) return openAiError(res, 404, `model "${parsed.model}" not found, try pulling it first`);
        const stop = stopWords(m.prepared.resolved.params.stop);
        if (parsed.stop === undefined && stop.length > 0 && /completions$/.test(path)) parsed.stop = stop;
        const json = parsed;
        asked = parsed.model;
        leased = async () => {
          lease = await this.o.scheduler.acquire(m.name, await this.want(m, undefined), undefined, abort.signal);
          json.model = lease.target;
          return Buffer.from(JSON.stringify(json));
        };
        body = await leased();
      }
    }
    try {
      const headers = { ...req.headers };
      for (const h of ["host", "connection", "content-length", "authorization", "keep-alive", "transfer-encoding"]) delete headers[h];
      let up = await this.o.upstream.send("POST", path, body, { headers, signal: abort.signal });
      if (leased && lease && (up.statusCode ?? 0) >= 400) {
        // the model's instance died since the scheduler last looked: load it again, once
        const said = await readUpTo(up, 1 << 20).catch(() => Buffer.alloc(0));
        if (/is not running|failed to load|is not loaded/.test(said.toString("utf8"))) {
          lease.lost();
          lease.release();
          lease = undefined;
          body = await leased();
          up = await this.o.upstream.send("POST", path, body, { headers, signal: abort.signal });
        } else {
          res.writeHead(up.statusCode ?? 502, passedHeaders(up)).end(said);
          return;
        }
      }
      res.writeHead(up.statusCode ?? 502, passedHeaders(up));
      // event streams pass through chunk by chunk as llama-server writes them
      await new Promise<void>((resolve, reject) => {
        up.once("error", reject);
        up.once("close", () => (up.complete ? resolve() : reject(new Error("llama-server closed the connection before the answer was finished"))));
        const text = /json|event-stream/.test(String(up.headers["content-type"] ?? ""));
        (asked !== undefined && text ? up.pipe(modelRenamer(asked)) : up).pipe(res);
      });
    } catch (e) {
      if (abort.signal.aborted) return;
      if (res.headersSent) res.destroy();
      else openAiError(res, 502, `llama-server: ${(e as Error).message}`);
    } finally {
      lease?.release();
    }
  }

  /** GET /v1/models[/:model] in Ollama's shape (openai/openai.go ListCompletion): our names, not the preset's. */
  private async openAiModels(res: ServerResponse, path: string): Promise<void> {
    const entry = async (m: ApiModel) => ({ id: m.name, object: "model", created: Math.floor((await m.facts).modifiedAt.getTime() / 1000), owned_by: ownerOf(m.name) });
    if (path === "/v1/models") return sendJson(res, 200, { object: "list", data: await Promise.all(this.o.models.map(entry)) });
    let ref: string;
    try {
      ref = decodedSegment(path.slice("/v1/models/".length));
    } catch (e) {
      return openAiError(res, 400, (e as Error).message);
    }
    const m = this.find(ref);
    if (!m) return openAiError(res, 404, `model "${ref}" not found`);
    sendJson(res, 200, await entry(m));
  }
}

/** The /v1 routes of Ollama's (server/routes.go) that llama-server answers, all POST. */
const V1_ROUTES = new Set(["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/audio/transcriptions", "/v1/messages"]);

/** An error on a /v1 route, in OpenAI's shape (what those clients read). */
function openAiError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { error: { message, type: "api_error", param: null, code: null } });
}

/** A percent-encoded path segment, decoded; a malformed escape (`%zz`, a cut UTF-8 sequence) is the client's error. */
function decodedSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw badRequest(`malformed percent escape in ${JSON.stringify(s)}`);
  }
}

/** The namespace of a name (`library` when it has none), as Ollama's /v1/models reports owned_by. */
function ownerOf(name: string): string {
  const n = parseModelName(name);
  return n?.namespace ?? "library";
}

type RouteHandler = (this: OllamaRoutes, req: IncomingMessage, res: ServerResponse, path: string) => Promise<void>;

const text = (s: string): RouteHandler =>
  async function (_req, res) {
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(s) }).end(s);
  };
const version: RouteHandler = async (_req, res) => sendJson(res, 200, { version: OLLAMA_API_VERSION });
/** api.StatusResponse: no Ollama cloud behind this server (source "env" when OLLAMA_NO_CLOUD says so too). */
const status: RouteHandler = async (_req, res) => sendJson(res, 200, { cloud: { disabled: true, source: process.env.OLLAMA_NO_CLOUD ? "env" : "config" } });
/** POST /api/me: nobody is signed in to ollama.com here (Ollama's answer when no account is). */
const whoami: RouteHandler = async (req, res) => {
  req.resume();
  sendJson(res, 401, { error: "unauthorized" });
};
const readOnly = OllamaRoutes.prototype.readOnly;

const ROUTES: Record<string, Partial<Record<string, RouteHandler>>> = {
  "/": { GET: text("Ollama is running") },
  "/api/version": { GET: version },
  "/api/status": { GET: status },
  "/api/me": { POST: whoami },
  "/api/tags": { GET: OllamaRoutes.prototype.tags },
  "/api/show": { POST: OllamaRoutes.prototype.show },
  "/api/ps": { GET: OllamaRoutes.prototype.ps },
  "/api/chat": { POST: OllamaRoutes.prototype.chat },
  "/api/generate": { POST: OllamaRoutes.prototype.generate },
  "/api/embed": { POST: OllamaRoutes.prototype.embed },
  "/api/embeddings": { POST: OllamaRoutes.prototype.embeddings },
  "/api/pull": { POST: OllamaRoutes.prototype.pull },
  "/api/push": { POST: readOnly },
  "/api/create": { POST: readOnly },
  "/api/copy": { POST: OllamaRoutes.prototype.copy },
  "/api/delete": { DELETE: OllamaRoutes.prototype.remove },
  "/api/blobs/:digest": { POST: readOnly, HEAD: OllamaRoutes.prototype.headBlob },
};

/** llama-server's response headers that go on to the client (not the ones of its own connection). */
function passedHeaders(up: IncomingMessage): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !["connection", "keep-alive", "transfer-encoding", "content-length"].includes(k)) out[k] = v;
  return out;
}
