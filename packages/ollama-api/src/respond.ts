import type { ServerResponse } from "node:http";
import { ApiError, upstreamMessage } from "./errors";
import type { Lease, ModelScheduler } from "./scheduler";
import { instanceGone, readText, type Upstream } from "./upstream";
import { readEvents, StreamError, type Decoder, type Finish, type OllamaToolCall, type Piece } from "./stream";
import type { LoadWant } from "./load-config";

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
function metrics(f: Finish, startedAt: number, loadMs: number): Record<string, number> {
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

/** What a non-streamed answer gathers: the whole text, reasoning, log-probabilities and tool calls. */
interface Whole {
  content: string;
  thinking: string;
  logprobs: unknown[];
  toolCalls: OllamaToolCall[];
}

/** How one kind of answer (/api/chat, /api/generate) is shaped from llama-server's pieces. */
export interface AnswerShape {
  /** One streamed NDJSON line (with its newline) for a piece. */
  piece(p: Piece): string;
  /** The last object (`done: true`), with the whole answer when not streamed. */
  final(f: Finish, whole: Whole | undefined): Record<string, unknown>;
}

export interface AnswerRequest {
  /** The Ollama name (the scheduler's key; the router is sent the configuration it leases). */
  model: string;
  keepAliveMs?: number;
  stream: boolean;
  path: string;
  body: Record<string, unknown>;
  decoder(): Decoder;
  shape: AnswerShape;
}

/**
 * Runs one generation through the router and answers it the way Ollama does: NDJSON objects as
 * tokens arrive (or one object with `stream: false`), the last with `done: true` and the
 * timings. A failure before anything was sent is an HTTP error; after, a last `{"error": …}`
 * line (server/routes.go streamResponse). A client that goes away cancels the upstream request,
 * which llama-server notices at its next token and stops generating.
 *
 * The per-token path is synchronous from llama-server's socket to the client's: each network
 * read is split into events, each event shaped into one line, and the lines of one read leave
 * in one write (LineWriter).
 */
export async function answer(scheduler: ModelScheduler, upstream: Upstream, res: ServerResponse, a: AnswerRequest, want: LoadWant): Promise<void> {
  const startedAt = performance.now();
  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on("close", onClose);
  let lease: Lease;
  try {
    lease = await scheduler.acquire(a.model, want, a.keepAliveMs, abort.signal);
  } catch (e) {
    res.off("close", onClose);
    throw e;
  }
  let started = false;
  let finished = false;
  const out = new LineWriter(res);
  const begin = () => {
    if (started) return;
    started = true;
    res.writeHead(200, { "content-type": "application/x-ndjson" });
  };
  try {
    a.body.model = lease.target;
    let up = await upstream.send("POST", a.path, a.body, { signal: abort.signal });
    for (let renewed = false; (up.statusCode ?? 500) >= 400; renewed = true) {
      const said = await readText(up);
      if (renewed || !instanceGone(said)) throw new ApiError(up.statusCode ?? 500, upstreamMessage(said));
      // the model's instance died since the scheduler last looked: nothing reached it, so the
      // request goes again, once, to the model loaded again
      lease = await scheduler.renew(lease, a.model, want, a.keepAliveMs, abort.signal);
      a.body.model = lease.target;
      up = await upstream.send("POST", a.path, a.body, { signal: abort.signal });
    }
    const whole: Whole | undefined = a.stream ? undefined : { content: "", thinking: "", logprobs: [], toolCalls: [] };
    const decode = a.decoder();
    const emit = (p: Piece | Finish) => {
      if (finished) return;
      if (p.done) {
        finished = true;
        const last = { ...a.shape.final(p, whole), ...metrics(p, startedAt, lease.loadMs) };
        // the model is idle before the client can read the end of its answer: its next request
        // (an unload with keep_alive 0, say, then a new load) must find the model idle
        lease.release();
        if (whole) return sendJson(res, 200, last);
        begin();
        out.flush();
        res.end(JSON.stringify(last) + "\n");
        return;
      }
      if (whole) {
        whole.content += p.content;
        whole.thinking += p.thinking;
        if (p.logprobs) whole.logprobs.push(...p.logprobs);
        if (p.toolCalls) whole.toolCalls.push(...p.toolCalls);
        return;
      }
      begin();
      out.add(a.shape.piece(p));
    };
    await readEvents(up, (event) => decode(event, emit), a.stream ? out : undefined);
    if (!finished) throw new StreamError("llama-server ended the answer before it was finished (its log may say why)");
  } catch (e) {
    if (abort.signal.aborted || finished) return; // nobody is listening, or the answer is complete
    scheduler.suspect(a.model);
    if (!started) throw e;
    out.flush();
    lease.release();
    if (!res.writableEnded) res.end(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + "\n");
  } finally {
    res.off("close", onClose);
    lease.release();
  }
}

/**
 * The NDJSON lines of a streamed answer, gathered over one network read from llama-server and
 * written as one HTTP chunk straight to the socket: one write call per read, where
 * ServerResponse.write makes three (chunk size, data, CRLF) through its own cork per line. The
 * first batch goes through ServerResponse.write, with the header in the same packet; direct
 * writes follow only while the response owns its socket and is chunked, which is the case but
 * for an HTTP/1.0 client or a pipelined request still waiting its turn.
 */
class LineWriter {
  private batch = "";
  private gathering = false;
  private direct = false;

  constructor(private readonly res: ServerResponse) {}

  add(line: string): void {
    this.batch += line;
    if (!this.gathering) this.flush();
  }

  /** readEvents' bracket around the events of one read. */
  readonly startRead = () => {
    this.gathering = true;
  };

  readonly endRead = () => {
    this.gathering = false;
    this.flush();
  };

  flush(): void {
    if (this.batch === "") return;
    const res = this.res as ServerResponse & { chunkedEncoding?: boolean };
    const socket = res.socket;
    if (this.direct && socket && !socket.destroyed) socket.write(`${Buffer.byteLength(this.batch).toString(16)}\r\n${this.batch}\r\n`);
    else if (!res.writableEnded) {
      res.write(this.batch);
      this.direct = res.socket !== null && res.chunkedEncoding === true;
    }
    this.batch = "";
  }
}
