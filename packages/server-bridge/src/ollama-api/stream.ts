import type { IncomingMessage } from "node:http";

/**
 * The JSON events of a llama-server event stream (`data: {…}` lines; `data: [DONE]` ends it),
 * each as soon as its line is complete.
 */
export async function* sseEvents(res: IncomingMessage): AsyncGenerator<Record<string, unknown>> {
  let partial = "";
  res.setEncoding("utf8");
  for await (const chunk of res as AsyncIterable<string>) {
    partial += chunk;
    let nl: number;
    while ((nl = partial.indexOf("\n")) >= 0) {
      const line = partial.slice(0, nl).trimEnd();
      partial = partial.slice(nl + 1);
      if (!line.startsWith("data: ")) continue; // blank separators, comments (": ping")
      const data = line.slice(6);
      if (data === "[DONE]") return;
      yield JSON.parse(data) as Record<string, unknown>;
    }
  }
}

/** llama-server's `timings` of a finished completion. */
export interface Timings {
  cache_n?: number;
  prompt_n?: number;
  prompt_ms?: number;
  predicted_n?: number;
  predicted_ms?: number;
}

/** The end of an answer: why it stopped, tool calls, and llama-server's timings. */
export interface Finish {
  done: true;
  reason: "stop" | "length";
  timings: Timings;
  toolCalls?: OllamaToolCall[];
}

/** Text as it arrives: answer and reasoning. */
export interface Piece {
  done: false;
  content: string;
  thinking: string;
  logprobs?: unknown[];
}

/** api.ToolCall. */
export interface OllamaToolCall {
  id?: string;
  function: { index: number; name: string; arguments: Record<string, unknown> };
}

/** Thrown when the stream ends, or says it failed, before the answer was finished. */
export class StreamError extends Error {}

/**
 * An OpenAI chat-completion stream from llama-server as pieces of text and one finish (the
 * chunk with `finish_reason`, whose `timings` llama-server adds). Tool calls arrive in fragments
 * and are handed over whole with the finish, as Ollama does.
 */
export async function* chatPieces(res: IncomingMessage): AsyncGenerator<Piece | Finish> {
  const calls = new Map<number, { id: string; name: string; args: string }>();
  for await (const event of sseEvents(res)) {
    if (event.error !== undefined) throw new StreamError(errorText(event.error));
    const choice = (event.choices as Array<Record<string, unknown>> | undefined)?.[0];
    if (!choice) continue;
    const delta = (choice.delta ?? {}) as { content?: string | null; reasoning_content?: string | null; tool_calls?: Array<{ index?: number; id?: string; function?: { name?: string; arguments?: string } }> };
    for (const tc of delta.tool_calls ?? []) {
      const i = tc.index ?? 0;
      const acc = calls.get(i) ?? { id: "", name: "", args: "" };
      acc.id += tc.id ?? "";
      acc.name += tc.function?.name ?? "";
      acc.args += tc.function?.arguments ?? "";
      calls.set(i, acc);
    }
    const content = delta.content ?? "";
    const thinking = delta.reasoning_content ?? "";
    const logprobs = (choice.logprobs as { content?: unknown[] } | null | undefined)?.content;
    if (content || thinking || logprobs?.length) yield { done: false, content, thinking, ...(logprobs?.length ? { logprobs } : {}) };
    if (choice.finish_reason) {
      const toolCalls = [...calls.entries()].sort(([a], [b]) => a - b).map(([index, c]) => toolCall(index, c));
      yield { done: true, reason: choice.finish_reason === "length" ? "length" : "stop", timings: (event.timings ?? {}) as Timings, ...(toolCalls.length ? { toolCalls } : {}) };
      return;
    }
  }
  throw new StreamError("llama-server ended the answer before it was finished (its log may say why)");
}

/** llama-server's own completion stream (/completion, /infill): `content` pieces, then `stop: true` with timings. */
export async function* completionPieces(res: IncomingMessage): AsyncGenerator<Piece | Finish> {
  for await (const event of sseEvents(res)) {
    if (event.error !== undefined) throw new StreamError(errorText(event.error));
    const content = typeof event.content === "string" ? event.content : "";
    if (content) yield { done: false, content, thinking: "" };
    if (event.stop === true) {
      yield { done: true, reason: event.stop_type === "limit" ? "length" : "stop", timings: (event.timings ?? {}) as Timings };
      return;
    }
  }
  throw new StreamError("llama-server ended the answer before it was finished (its log may say why)");
}

function toolCall(index: number, c: { id: string; name: string; args: string }): OllamaToolCall {
  let args: Record<string, unknown> = {};
  if (c.args.trim() !== "") {
    try {
      args = JSON.parse(c.args) as Record<string, unknown>;
    } catch {
      throw new StreamError(`llama-server returned invalid tool call arguments for "${c.name}": ${c.args.slice(0, 200)}`);
    }
  }
  return { ...(c.id ? { id: c.id } : {}), function: { index, name: c.name, arguments: args } };
}

function errorText(e: unknown): string {
  if (typeof e === "string") return e;
  if (e && typeof e === "object" && typeof (e as { message?: unknown }).message === "string") return (e as { message: string }).message;
  return JSON.stringify(e);
}
