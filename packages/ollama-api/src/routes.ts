import type { IncomingMessage, ServerResponse } from "node:http";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { displayName, parseModelName } from "@compat/store";
import { chatRequest, generateRequest, isHousekeeping, jsonBody } from "./chat";
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
  "ollama-compat serves the Ollama model store read-only: pull, create, copy, push and delete models with the ollama command, then restart ollama-compat serve --all";

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
}

/**
 * Ollama's REST API (server/routes.go GenerateRoutes) over llama-server's router, and the
 * router's OpenAI routes (/v1/*) passed through with the same model names.
 */
export class OllamaRoutes {
  private readonly byName = new Map<string, ApiModel>();

  constructor(private readonly o: RoutesOptions) {
    for (const m of o.models) this.byName.set(m.name.toLowerCase(), m);
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
      if (path.startsWith("/v1/")) return await this.passthrough(req, res, path);
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

  private async body(req: IncomingMessage): Promise<Json> {
    return jsonBody(await readBody(req, this.o.maxBodyBytes));
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
    const body = await this.body(req);
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

  async generate(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const body = await this.body(req);
    const m = this.model(body);
    const r = path === "/api/chat" ? await chatRequest(m, body) : await generateRequest(m, body);
    const want = await this.want(m, body.options);
    if (!isHousekeeping(r)) return answer(this.o.scheduler, this.o.upstream, res, r, want);
    if (r.kind === "unload") await this.o.scheduler.unload(m.name);
    else (await this.o.scheduler.acquire(m.name, want, r.keepAliveMs)).release();
    sendJson(res, 200, r.reply);
  }

  async embed(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const body = await this.body(req);
    const m = this.model(body);
    const run = path === "/api/embed" ? embed : embeddings;
    // Ollama embeds with any model; one that is not an embedding model is loaded as one for it
    const f = await m.facts;
    const want = this.o.configs.want(m, body.options, f.contextLength, !f.capabilities.includes("embedding"));
    sendJson(res, 200, await run(this.o.scheduler, this.o.upstream, m, body, want));
  }

  async readOnly(req: IncomingMessage, res: ServerResponse): Promise<void> {
    req.resume();
    sendJson(res, 403, { error: STORE_READ_ONLY });
  }

  /** HEAD /api/blobs/:digest: whether the store has the blob (what `ollama create` asks before an upload). */
  async headBlob(_req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const digest = decodeURIComponent(path.slice("/api/blobs/".length));
    const m = /^sha256[:-]([0-9a-f]{64})$/.exec(digest);
    if (!m) throw badRequest(`invalid digest format: ${digest}`);
    res.writeHead(existsSync(join(this.o.storeRoot, "blobs", `sha256-${m[1]}`)) ? 200 : 404).end();
  }

  /**
   * /v1/*: llama-server's OpenAI routes, with the model named as Ollama users name it, loaded
   * through the scheduler, and the model's stop words when a request gives none.
   */
  private async passthrough(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if (req.method === "GET" && (path === "/v1/models" || path.startsWith("/v1/models/"))) return this.openAiModels(res, path);
    // bytes as they came (multipart uploads are not text); JSON bodies get Ollama's names
    let body: Buffer | undefined = req.method === "GET" || req.method === "HEAD" ? undefined : await readBytes(req, this.o.maxBodyBytes);
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
        const v = JSON.parse(body.toString("utf8")) as unknown;
        if (typeof v === "object" && v !== null && !Array.isArray(v)) parsed = v as Json;
      } catch {
        // llama-server answers what it cannot parse
      }
      if (parsed && typeof parsed.model === "string") {
        const m = this.find(parsed.model);
        if (!m) return sendJson(res, 404, { error: { message: `model "${parsed.model}" not found, try pulling it first`, type: "api_error", param: null, code: null } });
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
      let up = await this.o.upstream.send(req.method ?? "GET", req.url ?? path, body, { headers, signal: abort.signal });
      if (leased && lease && (up.statusCode ?? 0) >= 400) {
        // the model's instance died since the scheduler last looked: load it again, once
        const said = await readBytes(up, 1 << 20).catch(() => Buffer.alloc(0));
        if (/is not running|failed to load|is not loaded/.test(said.toString("utf8"))) {
          lease.lost();
          lease.release();
          lease = undefined;
          body = await leased();
          up = await this.o.upstream.send(req.method ?? "GET", req.url ?? path, body, { headers, signal: abort.signal });
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
      else sendJson(res, 502, { error: { message: `llama-server: ${(e as Error).message}`, type: "api_error", param: null, code: null } });
    } finally {
      lease?.release();
    }
  }

  /** GET /v1/models[/:model] in Ollama's shape (openai/openai.go ListCompletion): our names, not the preset's. */
  private async openAiModels(res: ServerResponse, path: string): Promise<void> {
    const entry = async (m: ApiModel) => ({ id: m.name, object: "model", created: Math.floor((await m.facts).modifiedAt.getTime() / 1000), owned_by: ownerOf(m.name) });
    if (path === "/v1/models") return sendJson(res, 200, { object: "list", data: await Promise.all(this.o.models.map(entry)) });
    const ref = decodeURIComponent(path.slice("/v1/models/".length));
    const m = this.find(ref);
    if (!m) return sendJson(res, 404, { error: { message: `model "${ref}" not found`, type: "api_error", param: null, code: null } });
    sendJson(res, 200, await entry(m));
  }
}

/** The namespace of a name (`library` when it has none), as Ollama's /v1/models reports owned_by. */
function ownerOf(name: string): string {
  const n = parseModelName(name);
  return n?.namespace ?? "library";
}

type Handler = (this: OllamaRoutes, req: IncomingMessage, res: ServerResponse, path: string) => Promise<void>;

const text = (s: string): Handler =>
  async function (_req, res) {
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(s) }).end(s);
  };
const version: Handler = async (_req, res) => sendJson(res, 200, { version: OLLAMA_API_VERSION });
/** api.StatusResponse: no Ollama cloud behind this server (source "env" when OLLAMA_NO_CLOUD says so too). */
const status: Handler = async (_req, res) => sendJson(res, 200, { cloud: { disabled: true, source: process.env.OLLAMA_NO_CLOUD ? "env" : "config" } });
/** POST /api/me: nobody is signed in to ollama.com here (Ollama's answer when no account is). */
const whoami: Handler = async (req, res) => {
  req.resume();
  sendJson(res, 401, { error: "unauthorized" });
};
const readOnly = OllamaRoutes.prototype.readOnly;

const ROUTES: Record<string, Partial<Record<string, Handler>>> = {
  "/": { GET: text("Ollama is running") },
  "/api/version": { GET: version },
  "/api/status": { GET: status },
  "/api/me": { POST: whoami },
  "/api/tags": { GET: OllamaRoutes.prototype.tags },
  "/api/show": { POST: OllamaRoutes.prototype.show },
  "/api/ps": { GET: OllamaRoutes.prototype.ps },
  "/api/chat": { POST: OllamaRoutes.prototype.generate },
  "/api/generate": { POST: OllamaRoutes.prototype.generate },
  "/api/embed": { POST: OllamaRoutes.prototype.embed },
  "/api/embeddings": { POST: OllamaRoutes.prototype.embed },
  "/api/pull": { POST: readOnly },
  "/api/push": { POST: readOnly },
  "/api/create": { POST: readOnly },
  "/api/copy": { POST: readOnly },
  "/api/delete": { DELETE: readOnly },
  "/api/blobs/:digest": { POST: readOnly, HEAD: OllamaRoutes.prototype.headBlob },
};

/** llama-server's response headers that go on to the client (not the ones of its own connection). */
function passedHeaders(up: IncomingMessage): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !["connection", "keep-alive", "transfer-encoding", "content-length"].includes(k)) out[k] = v;
  return out;
}

/** A request body, refused beyond `max` bytes (413). */
function readBytes(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > max) {
        req.removeAllListeners("data");
        req.resume();
        reject(new ApiError(413, `request body larger than ${max} bytes`));
      } else chunks.push(c);
    });
    req.once("end", () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.once("error", reject);
    req.once("close", () => {
      if (!req.complete) reject(new ApiError(400, "the client closed the connection before the whole request body came"));
    });
  });
}

async function readBody(req: IncomingMessage, max: number): Promise<string> {
  return (await readBytes(req, max)).toString("utf8");
}
