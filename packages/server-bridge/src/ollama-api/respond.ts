import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError, upstreamMessage } from "./errors";
import type { ModelScheduler } from "./scheduler";
import { readText, type Upstream } from "./upstream";
import type { Finish, Piece } from "./stream";

/** JSON with Ollama's content type. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** An error as Ollama sends it: `{"error": "…"}`. */
export function sendError(res: ServerResponse, e: unknown): void {
  const status = e instanceof ApiError ? e.status : 500;
  sendJson(res, status, { error: e instanceof Error ? e.message : String(e) });
}

/** Nanoseconds, as Go's time.Duration marshals. */
const ns = (ms: number) => Math.round(ms * 1e6);

/** api.Metrics of a finished answer (Ollama leaves out the zero ones). */
export function metrics(f: Finish, startedAt: number, loadMs: number): Record<string, number> {
  const t = f.timings;
  const m: Record<string, number> = {
    total_duration: ns(performance.now() - startedAt),
    load_duration: ns(loadMs),
    prompt_eval_count: (t.cache_n ?? 0) + (t.prompt_n ?? 0),
    prompt_eval_duration: ns(t.prompt_ms ?? 0),
    eval_count: t.predicted_n ?? 0,
    eval_duration: ns(t.predicted_ms ?? 0),
  };
  for (const k of Object.keys(m)) if (m[k] === 0) delete m[k];
  return m;
}

/** How one kind of answer (/api/chat, /api/generate) is shaped from llama-server's pieces. */
export interface AnswerShape {
  /** One streamed object for a piece of text. */
  piece(p: Piece): Record<string, unknown>;
  /** The last object (`done: true`), with the whole text when not streamed. */
  final(f: Finish, whole: { content: string; thinking: string; logprobs: unknown[] } | undefined): Record<string, unknown>;
}

export interface AnswerRequest {
  model: string;
  keepAliveMs?: number;
  stream: boolean;
  path: string;
  body: Record<string, unknown>;
  pieces(res: IncomingMessage): AsyncGenerator<Piece | Finish>;
  shape: AnswerShape;
}

/**
 * Runs one generation through the router and answers it the way Ollama does: NDJSON objects as
 * tokens arrive (or one object with `stream: false`), the last with `done: true` and the
 * timings. A failure before anything was sent is an HTTP error; after, a last `{"error": …}`
 * line (server/routes.go streamResponse). A client that goes away stops the generation.
 */
export async function answer(scheduler: ModelScheduler, upstream: Upstream, req: IncomingMessage, res: ServerResponse, a: AnswerRequest): Promise<void> {
  const startedAt = performance.now();
  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on("close", onClose);
  const lease = await scheduler.acquire(a.model, a.keepAliveMs, abort.signal);
  let started = false;
  try {
    const up = await upstream.send("POST", a.path, a.body, { signal: abort.signal });
    if ((up.statusCode ?? 500) >= 400) throw new ApiError(up.statusCode ?? 500, upstreamMessage(await readText(up)));
    const whole = a.stream ? undefined : { content: "", thinking: "", logprobs: [] as unknown[] };
    for await (const p of a.pieces(up)) {
      if (!p.done) {
        if (whole) {
          whole.content += p.content;
          whole.thinking += p.thinking;
          if (p.logprobs) whole.logprobs.push(...p.logprobs);
          continue;
        }
        if (!started) {
          res.writeHead(200, { "content-type": "application/x-ndjson" });
          started = true;
        }
        res.write(JSON.stringify(a.shape.piece(p)) + "\n");
        continue;
      }
      const last = { ...a.shape.final(p, whole), ...metrics(p, startedAt, lease.loadMs) };
      if (whole) return sendJson(res, 200, last);
      if (!started) res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.end(JSON.stringify(last) + "\n");
      return;
    }
  } catch (e) {
    if (abort.signal.aborted) return; // nobody is listening
    if (!started) throw e;
    res.end(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + "\n");
  } finally {
    res.off("close", onClose);
    lease.release();
  }
}
