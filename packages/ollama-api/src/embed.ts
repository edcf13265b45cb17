import { parseKeepAlive } from "./duration";
import { ApiError, badRequest, upstreamMessage } from "./errors";
import type { LoadWant } from "./load-config";
import type { ApiModel } from "./models";
import type { ModelScheduler } from "./scheduler";
import { instanceGone, type Upstream } from "./upstream";

type Json = Record<string, unknown>;

/** Ollama normalizes every embedding to unit length (and again after cutting `dimensions`). */
function normalize(v: number[]): number[] {
  let sum = 0;
  for (const x of v) {
    if (!Number.isFinite(x)) throw new ApiError(500, "embedding contains NaN or Inf values");
    sum += x * x;
  }
  const k = 1 / Math.max(Math.sqrt(sum), 1e-12);
  return v.map((x) => x * k);
}

/**
 * The largest input llama-server takes, from its refusal of a longer one: the physical batch
 * (an embedding is computed in one), or the context (server-context.cpp).
 */
function inputLimit(message: string): number | undefined {
  const batch = /too large to process.*current batch size: (\d+)/.exec(message);
  if (batch) return Number(batch[1]);
  const ctx = /larger than the max context size \((\d+) tokens\)/.exec(message);
  if (ctx) return Number(ctx[1]);
  const avail = /exceeds the available context size \((\d+) tokens\)/.exec(message);
  return avail ? Number(avail[1]) - 1 : undefined;
}

/**
 * `text` cut to `limit` tokens, counting the ones the model adds around it (BOS, EOS), as
 * Ollama's EmbedHandler cuts it: the text's own tokens are cut and turned back into text.
 */
async function cut(upstream: Upstream, target: string, text: string, limit: number): Promise<string> {
  const tokenize = async (addSpecial: boolean) => {
    const { status, text: body } = await upstream.call("POST", "/tokenize", { model: target, content: text, add_special: addSpecial, parse_special: true });
    if (status >= 400) throw new ApiError(status, upstreamMessage(body));
    return (JSON.parse(body) as { tokens: number[] }).tokens;
  };
  const all = await tokenize(true);
  if (all.length <= limit) return text;
  const own = await tokenize(false);
  const keep = limit - (all.length - own.length);
  if (keep <= 0) throw badRequest("input after truncation exceeds maximum context length");
  const { status, text: body } = await upstream.call("POST", "/detokenize", { model: target, tokens: own.slice(0, keep) });
  if (status >= 400) throw new ApiError(status, upstreamMessage(body));
  return (JSON.parse(body) as { content: string }).content;
}

async function embedTexts(scheduler: ModelScheduler, upstream: Upstream, m: ApiModel, input: string[], keepAliveMs: number | undefined, want: LoadWant, truncate: boolean): Promise<{ vectors: number[][]; tokens: number; loadMs: number }> {
  const startedAt = performance.now();
  let lease = await scheduler.acquire(m.name, want, keepAliveMs);
  // Ollama's load_duration: from the request to its runner, loaded or not (never 0)
  const loadMs = performance.now() - startedAt;
  try {
    if (input.length === 0) return { vectors: [], tokens: 0, loadMs };
    let texts = input;
    let renewed = false;
    for (let attempt = 0; ; attempt++) {
      const { status, text } = await upstream.call("POST", "/v1/embeddings", { model: lease.target, input: texts });
      if (status >= 400 && !renewed && instanceGone(text)) {
        // the model's instance died since the scheduler last looked: nothing reached it, so the
        // request goes again, once, to the model loaded again
        renewed = true;
        lease = await scheduler.renew(lease, m.name, want, keepAliveMs);
        continue;
      }
      if (status < 400) {
        const body = JSON.parse(text) as { data: Array<{ index?: number; embedding: number[] }>; usage?: { prompt_tokens?: number } };
        const vectors = [...body.data].sort((a, b) => (a.index ?? 0) - (b.index ?? 0)).map((d) => d.embedding);
        return { vectors, tokens: body.usage?.prompt_tokens ?? 0, loadMs };
      }
      const msg = upstreamMessage(text);
      const limit = inputLimit(msg);
      if (limit === undefined) throw new ApiError(status, msg);
      // what Ollama says for an input longer than the context when it may not cut it (server/routes.go)
      if (!truncate || attempt >= 2) throw badRequest("the input length exceeds the context length");
      texts = await Promise.all(texts.map((t) => cut(upstream, lease.target, t, limit)));
    }
  } finally {
    lease.release();
  }
}

/** POST /api/embed: `input` (a string or strings) → unit-length `embeddings`, cut to `dimensions` if asked. */
export async function embed(scheduler: ModelScheduler, upstream: Upstream, m: ApiModel, body: Json, want: LoadWant): Promise<Json> {
  const startedAt = performance.now();
  const raw = body.input;
  let input: string[];
  if (raw === undefined || raw === null || raw === "") input = [];
  else if (typeof raw === "string") input = [raw];
  else if (Array.isArray(raw) && raw.every((s) => typeof s === "string")) input = raw as string[];
  else throw badRequest("invalid input type");
  const dims = body.dimensions;
  if (dims !== undefined && (typeof dims !== "number" || !Number.isInteger(dims) || dims < 0)) throw badRequest("dimensions: expected a non-negative integer");
  if (body.truncate !== undefined && body.truncate !== null && typeof body.truncate !== "boolean") throw badRequest("truncate: expected a boolean");
  const { vectors, tokens, loadMs } = await embedTexts(scheduler, upstream, m, input, parseKeepAlive(body.keep_alive), want, body.truncate !== false);
  const embeddings = vectors.map((v) => {
    const unit = normalize(v);
    return dims && dims < unit.length ? normalize(unit.slice(0, dims)) : unit;
  });
  if (input.length === 0) return { model: m.name, embeddings: [] };
  const out: Json = { model: m.name, embeddings, total_duration: Math.round((performance.now() - startedAt) * 1e6), load_duration: Math.max(1, Math.round(loadMs * 1e6)) };
  if (tokens > 0) out.prompt_eval_count = tokens;
  return out;
}

/** POST /api/embeddings (the older call): one `prompt` → `embedding`, as llama-server returns it. */
export async function embeddings(scheduler: ModelScheduler, upstream: Upstream, m: ApiModel, body: Json, want: LoadWant): Promise<Json> {
  if (body.prompt !== undefined && typeof body.prompt !== "string") throw badRequest("prompt: expected a string");
  const prompt = (body.prompt as string | undefined) ?? "";
  const { vectors } = await embedTexts(scheduler, upstream, m, prompt === "" ? [] : [prompt], parseKeepAlive(body.keep_alive), want, true);
  return { embedding: vectors[0] ?? [] };
}
