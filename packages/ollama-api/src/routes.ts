import type { IncomingMessage, ServerResponse } from "node:http";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { blobDigest, blobFileName, canonicalDigest, copyModel, createModel, deleteModel, displayName, existingName, manifestPathIn, parseModelName, pullModel, receiveBlob, RegistryError, removeUnreferenced, StoreError, type ModelName, type CreateSpec, type PullProgress } from "@compat/store";
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
import { instanceGone, type Upstream } from "./upstream";
import type { InstanceLog } from "./instance-log";

/** The Ollama release whose API this implements (what /api/version says; clients check minimums). */
export const OLLAMA_API_VERSION = "0.32.15";

const NO_PUSH = "ollama-compat serve --all does not push models: push with the ollama command";
const NO_FILES =
  "ollama-compat serve --all creates a model only from one in the store (\"from\"), not from uploaded files (GGUF or safetensors): create it with the ollama command, then it is served here";
const NO_QUANTIZE =
  "ollama-compat serve --all does not quantize: create the model without quantize, or quantize the GGUF with llama.cpp's llama-quantize (or the ollama command)";

/** The largest blob POST /api/blobs/:digest takes (an adapter is far smaller; a model upload is for a create from files, which is refused). */
const MAX_BLOB_UPLOAD_BYTES = 8 * 2 ** 30;

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
  /** Makes a model just written to the store servable (prepared, in the router's preset); /api/pull, /api/copy and /api/create call it. */
  addModel?: (name: string) => Promise<ApiModel>;
  /** OLLAMA_NOPRUNE and the like, as pull and create read them. */
  env?: Record<string, string | undefined>;
}

/**
 * Ollama's REST API (server/routes.go GenerateRoutes) over llama-server's router, and the
 * router's OpenAI routes (/v1/*) passed through with the same model names.
 */
export class OllamaRoutes {
  private readonly byName = new Map<string, ApiModel>();
  private readonly bodies: BodyBudget;
  /** Models replaced or deleted whose instance may still be loaded: their blobs stay until it is gone. */
  private readonly retiring = new Set<ApiModel>();
  /** Blobs nothing names any more that were kept for a running instance; removed once it is gone. */
  private readonly deferred = new Set<string>();

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
      ...(r.messages?.length ? { messages: r.messages } : {}),
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
    // ISO 8601 times of one format order as their code units do (localeCompare would load ICU collation data)
    models.sort((a, b) => (a.expires_at < b.expires_at ? 1 : a.expires_at > b.expires_at ? -1 : 0));
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
        env: this.o.env,
        keep: this.keep,
        onProgress: (p) => {
          // "success" is said once the model is served too
          if (stream && p.status !== "success") send(p);
        },
      });
      await this.reserve(pulled.name);
      if (!stream) return sendJson(res, 200, { status: "success" });
      send({ status: "success" });
      res.end();
    } catch (e) {
      if (abort.signal.aborted) return;
      const message = failureMessage(e);
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
    await this.reserve(destination);
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
      await deleteModel(this.o.storeRoot, n, this.keep);
    } catch (e) {
      if (e instanceof StoreError && e.code === "UNKNOWN_MODEL") throw modelNotFound(String(ref));
      throw e;
    }
    const m = this.find(displayName(n));
    if (m) {
      this.byName.delete(m.name.toLowerCase());
      this.o.models.splice(this.o.models.indexOf(m), 1);
      await this.retire(m);
    }
    res.writeHead(200).end();
  }

  /**
   * POST /api/create from a model of the store (`from`), as Ollama's CreateHandler writes it
   * (see createModel): progress objects streamed as NDJSON (`stream: false`: the last one
   * alone), then the model served by the running router, replacing a served one of that name.
   * A `from` not in the store is pulled from its registry first and served too, its progress
   * streamed before the create's, as Ollama's parseFromModel does (`insecure`, which Ollama's
   * create does not take, lets it come over plain HTTP). Create from uploaded files and quantize
   * are refused with a message.
   */
  async create(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.body(req, res);
    const ref = typeof body.model === "string" && body.model !== "" ? body.model : body.name;
    const parsed = typeof ref === "string" ? parseModelName(ref) : null;
    if (!parsed) throw badRequest("invalid model name");
    const name = await existingName(this.o.storeRoot, parsed);
    for (const k of ["quantize", "quantization", "draft_quantize"]) if (typeof body[k] === "string" && body[k] !== "") throw badRequest(NO_QUANTIZE);
    if (typeof body.remote_host === "string" && body.remote_host !== "") throw badRequest("ollama-compat serve --all does not create remote models (remote_host)");
    const from = typeof body.from === "string" && body.from !== "" ? body.from : undefined;
    if (from === undefined || isFilled(body.draft_files)) {
      if (isFilled(body.files) || isFilled(body.draft_files)) throw new ApiError(403, NO_FILES);
      throw badRequest("neither 'from' or 'files' was specified");
    }
    const fromName = parseModelName(from);
    if (!fromName) throw badRequest("invalid model name");
    const spec = createSpec(body, name, fromName);
    const stream = body.stream !== false;
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort(new Error("the client went away"));
    });
    const send = (p: PullProgress | { error: string }) => {
      if (!stream) return;
      if (!res.headersSent) res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.write(JSON.stringify(p) + "\n");
    };
    try {
      try {
        await createModel(this.o.storeRoot, spec, { onProgress: send, keep: this.keep, env: this.o.env });
      } catch (e) {
        if (!(e instanceof StoreError && e.code === "UNKNOWN_MODEL" && e.details.manifestPath === manifestPathIn(this.o.storeRoot, fromName))) throw e;
        // the source is not installed: pulled, and served, before the create goes on. Ollama streams the
        // pull's "success" too, but the official clients stop reading at the first one: here it is said once, at the end
        const pulled = await pullModel(from, {
          root: this.o.storeRoot,
          insecure: body.insecure === true,
          signal: abort.signal,
          env: this.o.env,
          keep: this.keep,
          onProgress: (p) => p.status !== "success" && send(p),
        });
        await this.reserve(pulled.name);
        await createModel(this.o.storeRoot, spec, { onProgress: send, keep: this.keep, env: this.o.env });
      }
      await this.reserve(name);
      if (!stream) return sendJson(res, 200, { status: "success" });
      send({ status: "success" });
      res.end();
    } catch (e) {
      if (abort.signal.aborted) return;
      const message = failureMessage(e);
      const status = e instanceof ApiError ? e.status : e instanceof StoreError && e.code === "INVALID_CREATE" ? 400 : 500;
      if (res.headersSent) {
        send({ error: message });
        res.end();
      } else sendJson(res, status, { error: message });
    }
  }

  /**
   * Serves what the store now has under `name`: added to the router, or, over a served model
   * whose manifest changed, swapped in for it, the old instance retired (see retire).
   */
  private async reserve(n: ModelName): Promise<void> {
    if (!this.o.addModel) return;
    const name = displayName(n);
    const old = this.find(name);
    const fresh = await this.o.addModel(name);
    if (!old) return this.serve(fresh);
    if ((await old.facts).digest === (await fresh.facts).digest) return;
    this.byName.set(old.name.toLowerCase(), fresh);
    this.o.models.splice(this.o.models.indexOf(old), 1, fresh);
    await this.retire(old);
  }

  /**
   * A model whose files are no longer what its name serves: its instance takes no new request
   * and goes once idle (the next request loads the new files); the blobs kept for it go then.
   * Waits for that when no request holds it; else it happens when the last one is done.
   */
  private async retire(old: ApiModel): Promise<void> {
    const busy = this.o.scheduler.busy(old.name);
    this.retiring.add(old);
    const gone = this.o.scheduler.retire(old.name).then(async () => {
      this.retiring.delete(old);
      const digests = [...this.deferred];
      this.deferred.clear();
      // a blob that cannot be removed now stays for Ollama's own prune: the store is right either way
      if (digests.length > 0) await removeUnreferenced(this.o.storeRoot, digests, this.keep).catch(() => undefined);
    });
    if (!busy) await gone;
    else gone.catch(() => undefined);
  }

  /** Whether a blob must stay for a served or retiring model's instance (it is then removed later, see retire). */
  private readonly keep = (digest: string): boolean => {
    for (const m of [...this.o.models, ...this.retiring]) {
      const r = m.prepared.resolved;
      const paths = [r.modelPath, ...r.projectors, ...r.adapters, ...(r.draft ? [r.draft] : [])];
      if (r.modelDigest === digest || paths.some((p) => blobDigest(p) === digest)) {
        this.deferred.add(digest);
        return true;
      }
    }
    return false;
  };

  /** Lists and serves a model added while running. */
  private serve(m: ApiModel): void {
    this.byName.set(m.name.toLowerCase(), m);
    this.o.models.push(m);
  }

  async push(req: IncomingMessage, res: ServerResponse): Promise<void> {
    discard(req, res);
    sendJson(res, 403, { error: NO_PUSH });
  }

  /**
   * POST /api/blobs/:digest: an upload into the store (what `ollama create` sends before it
   * names the blob), checked against the digest and renamed to it only then (receiveBlob);
   * 200 when the store has it already, 201 when written, 400 on a mismatch.
   */
  async postBlob(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const digest = decodedSegment(path.slice("/api/blobs/".length));
    if (canonicalDigest(digest) === undefined || !/^sha256:/.test(digest)) {
      discard(req, res);
      throw badRequest(`invalid digest format: ${digest}`);
    }
    const declared = Number(req.headers["content-length"] ?? 0);
    if (declared > MAX_BLOB_UPLOAD_BYTES) {
      discard(req, res);
      throw new ApiError(413, `the upload of ${digest} is ${declared} bytes; this server takes blobs of at most ${MAX_BLOB_UPLOAD_BYTES} bytes`);
    }
    let written: boolean;
    try {
      written = await receiveBlob(this.o.storeRoot, canonicalDigest(digest)!, req, MAX_BLOB_UPLOAD_BYTES);
    } catch (e) {
      if (e instanceof StoreError && (e.code === "DIGEST_MISMATCH" || e.code === "INVALID_CREATE")) {
        discard(req, res);
        throw badRequest(e.message);
      }
      throw e;
    }
    if (!written) discard(req, res);
    res.writeHead(written ? 201 : 200).end();
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
        // the model's instance died since the scheduler last looked (instanceGone): load it again, once
        const said = await readUpTo(up, 1 << 20).catch(() => Buffer.alloc(0));
        if (instanceGone(said.toString("utf8"))) {
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
        // idle before the client reads the answer's end (the pipe's own end listener runs after this one)
        up.once("end", () => lease?.release());
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
  "/api/push": { POST: OllamaRoutes.prototype.push },
  "/api/create": { POST: OllamaRoutes.prototype.create },
  "/api/copy": { POST: OllamaRoutes.prototype.copy },
  "/api/delete": { DELETE: OllamaRoutes.prototype.remove },
  "/api/blobs/:digest": { POST: OllamaRoutes.prototype.postBlob, HEAD: OllamaRoutes.prototype.headBlob },
};

/** The routes whose answer needs no model, store or router: a starting API gives them at once, as Ollama does once it listens. */
const WITHOUT_ROUTER = new Set(["/", "/api/version", "/api/status"]);

/**
 * Answers a request that needs nothing of the router (`GET`/`HEAD /`, `/api/version`,
 * `/api/status`) while the API starts; false for any other, which waits for the routes.
 */
export async function answerWhileStarting(req: IncomingMessage, res: ServerResponse): Promise<boolean> {
  const path = (req.url ?? "/").split("?")[0]!;
  const method = req.method === "HEAD" ? "GET" : req.method;
  const handler = WITHOUT_ROUTER.has(path) && method === "GET" ? ROUTES[path]?.GET : undefined;
  if (handler === undefined) return false;
  await handler.call(undefined as unknown as OllamaRoutes, req, res, path);
  return true;
}

/** llama-server's response headers that go on to the client (not the ones of its own connection). */
function passedHeaders(up: IncomingMessage): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !["connection", "keep-alive", "transfer-encoding", "content-length"].includes(k)) out[k] = v;
  return out;
}

/**
 * A failure's message, in Ollama's words where clients read them: a manifest the registry does
 * not have is "pull model manifest: file does not exist" (PullModel wrapping os.ErrNotExist);
 * any other failure says what went wrong in our words.
 */
function failureMessage(e: unknown): string {
  if (e instanceof RegistryError && e.code === "NOT_IN_REGISTRY" && /\/manifests\//.test(String(e.details.url))) return "pull model manifest: file does not exist";
  return e instanceof Error ? e.message : String(e);
}

/** A JSON value that says something: not absent, null, "", [] or {}. */
function isFilled(v: unknown): boolean {
  if (v === undefined || v === null || v === "") return false;
  if (typeof v === "object") return Object.keys(v).length > 0;
  return true;
}

/** The fields of a create request createModel takes, their types checked (a wrong one is a 400, as Go's decoder makes it). */
function createSpec(body: Json, name: ModelName, from: ModelName): CreateSpec {
  const bad = (field: string, want: string) => badRequest(`json: cannot unmarshal ${JSON.stringify(body[field])} into Go struct field CreateRequest.${field} of type ${want}`);
  const spec: CreateSpec = { name, from };
  for (const k of ["template", "system"] as const) {
    const v = body[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string") throw bad(k, "string");
    spec[k] = v;
  }
  const license = body.license;
  if (license !== undefined && license !== null) {
    if (typeof license === "string" || (Array.isArray(license) && license.every((l) => typeof l === "string"))) spec.license = license as string | string[];
    else throw bad("license", "string or []string");
  }
  const params = body.parameters;
  if (params !== undefined && params !== null) {
    if (typeof params !== "object" || Array.isArray(params)) throw bad("parameters", "map[string]interface {}");
    spec.parameters = params as Record<string, unknown>;
  }
  const messages = body.messages;
  if (messages !== undefined && messages !== null) {
    if (!Array.isArray(messages) || !messages.every((m) => typeof m === "object" && m !== null && !Array.isArray(m) && typeof (m as Json).role === "string")) throw bad("messages", "[]api.Message");
    spec.messages = messages as Json[];
  }
  const adapters = body.adapters;
  if (adapters !== undefined && adapters !== null) {
    if (typeof adapters !== "object" || Array.isArray(adapters) || !Object.values(adapters).every((d) => typeof d === "string" && d !== "")) throw bad("adapters", "map[string]string");
    spec.adapters = adapters as Record<string, string>;
  }
  return spec;
}
