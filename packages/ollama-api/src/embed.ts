import { parseKeepAlive } from "./duration";
import { ApiError, badRequest, upstreamMessage } from "./errors";
import type { LoadWant } from "./load-config";
import type { ApiModel } from "./models";
import type { ModelScheduler } from "./scheduler";
import type { Upstream } from "./upstream";

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

async function embedTexts(scheduler: ModelScheduler, upstream: Upstream, m: ApiModel, input: string[], keepAliveMs: number | undefined, want: LoadWant): Promise<{ vectors: number[][]; tokens: number; loadMs: number }> {
  const lease = await scheduler.acquire(m.name, want, keepAliveMs);
  try {
    if (input.length === 0) return { vectors: [], tokens: 0, loadMs: lease.loadMs };
    const { status, text } = await upstream.call("POST", "/v1/embeddings", { model: lease.target, input });
    if (status >= 400) {
      const msg = upstreamMessage(text);
      // what Ollama says for an input longer than the context (llm/llama_server.go)
      if (/too large|context size|context length|physical batch size|exceeds the available context/i.test(msg)) throw badRequest("the input length exceeds the context length");
      throw new ApiError(status, msg);
    }
    const body = JSON.parse(text) as { data: Array<{ index?: number; embedding: number[] }>; usage?: { prompt_tokens?: number } };
    const vectors = [...body.data].sort((a, b) => (a.index ?? 0) - (b.index ?? 0)).map((d) => d.embedding);
    return { vectors, tokens: body.usage?.prompt_tokens ?? 0, loadMs: lease.loadMs };
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
  const { vectors, tokens, loadMs } = await embedTexts(scheduler, upstream, m, input, parseKeepAlive(body.keep_alive), want);
  const embeddings = vectors.map((v) => {
    const unit = normalize(v);
    return dims && dims < unit.length ? normalize(unit.slice(0, dims)) : unit;
  });
  if (input.length === 0) return { model: m.name, embeddings: [] };
  const out: Json = { model: m.name, embeddings, total_duration: Math.round((performance.now() - startedAt) * 1e6) };
  if (loadMs > 0) out.load_duration = Math.round(loadMs * 1e6);
  if (tokens > 0) out.prompt_eval_count = tokens;
  return out;
}

/** POST /api/embeddings (the older call): one `prompt` → `embedding`, as llama-server returns it. */
export async function embeddings(scheduler: ModelScheduler, upstream: Upstream, m: ApiModel, body: Json, want: LoadWant): Promise<Json> {
  if (body.prompt !== undefined && typeof body.prompt !== "string") throw badRequest("prompt: expected a string");
  const prompt = (body.prompt as string | undefined) ?? "";
  const { vectors } = await embedTexts(scheduler, upstream, m, prompt === "" ? [] : [prompt], parseKeepAlive(body.keep_alive), want);
  return { embedding: vectors[0] ?? [] };
}
