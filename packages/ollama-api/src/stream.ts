import type { IncomingMessage } from "node:http";
import { StringDecoder } from "node:string_decoder";
import { Transform } from "node:stream";

type Json = Record<string, unknown>;

/**
 * Reads a llama-server event stream (`data: {…}` lines; `data: [DONE]` ends it) and hands each
 * JSON event to `onEvent` as soon as its line is complete, synchronously, in the socket's own
 * `data` callback: one event per token, so no promise or generator step per token. `reads`
 * brackets the events of one network read (the caller writes what they made at its end).
 * Resolves when the stream ends; rejects when it breaks off or `onEvent` throws.
 */
export function readEvents(res: IncomingMessage, onEvent: (event: Json) => void, reads?: { startRead(): void; endRead(): void }): Promise<void> {
  return new Promise((resolve, reject) => {
    const decoder = new StringDecoder("utf8");
    let partial = "";
    let settled = false;
    const settle = (e?: unknown) => {
      if (settled) return;
      settled = true;
      res.off("data", onData);
      if (e === undefined) resolve();
      else {
        res.destroy();
        reject(e);
      }
    };
    const onData = (chunk: Buffer) => {
      const text = partial === "" ? decoder.write(chunk) : partial + decoder.write(chunk);
      let start = 0;
      let nl: number;
      reads?.startRead();
      try {
        while ((nl = text.indexOf("\n", start)) >= 0) {
          // "data: " lines; blank separators and comments (": ping") are skipped
          if (text.startsWith("data: ", start)) {
            const end = text.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
            if (!(end - start === 12 && text.startsWith("[DONE]", start + 6))) onEvent(JSON.parse(text.slice(start + 6, end)) as Json);
          }
          start = nl + 1;
        }
      } catch (e) {
        settle(e);
        return;
      } finally {
        reads?.endRead();
      }
      partial = start === text.length ? "" : text.slice(start);
    };
    res.on("data", onData);
    res.once("end", () => settle());
    res.once("error", (e) => settle(e));
    // a connection closed before the end of the response (llama-server died, or we aborted it)
    res.once("close", () => settle(res.complete ? undefined : new StreamError("llama-server closed the connection before the answer was finished")));
  });
}

/** llama-server's `timings` of a finished completion. */
interface Timings {
  cache_n?: number;
  prompt_n?: number;
  prompt_ms?: number;
  predicted_n?: number;
  predicted_ms?: number;
}

/** The end of an answer: why it stopped, and llama-server's timings. */
export interface Finish {
  done: true;
  reason: "stop" | "length";
  timings: Timings;
}

/** Text as it arrives (answer and reasoning), or the tool calls, whole. */
export interface Piece {
  done: false;
  content: string;
  thinking: string;
  logprobs?: unknown[];
  toolCalls?: OllamaToolCall[];
}

/** api.ToolCall. */
export interface OllamaToolCall {
  id?: string;
  function: { index: number; name: string; arguments: Record<string, unknown> };
}

/** Thrown when the stream ends, or says it failed, before the answer was finished. */
export class StreamError extends Error {}

/** Turns each event of one answer's stream into what it says: pieces, then one finish. */
export type Decoder = (event: Json, emit: (p: Piece | Finish) => void) => void;

type ToolCallDelta = { index?: number; id?: string; function?: { name?: string; arguments?: string } };

/**
 * An OpenAI chat-completion stream from llama-server: pieces of text, then the chunk with
 * `finish_reason` (whose `timings` llama-server adds). Tool calls arrive in fragments; they are
 * handed over whole, as one piece just before the finish, as Ollama streams them.
 */
export function chatDecoder(): Decoder {
  let calls: Map<number, { id: string; name: string; args: string }> | undefined;
  return (event, emit) => {
    if (event.error !== undefined) throw new StreamError(errorText(event.error));
    const choice = (event.choices as Json[] | undefined)?.[0];
    if (!choice) return;
    const delta = choice.delta as { content?: string | null; reasoning_content?: string | null; tool_calls?: ToolCallDelta[] } | undefined;
    if (delta?.tool_calls) {
      calls ??= new Map();
      for (const tc of delta.tool_calls) {
        const i = tc.index ?? 0;
        const acc = calls.get(i) ?? { id: "", name: "", args: "" };
        acc.id += tc.id ?? "";
        acc.name += tc.function?.name ?? "";
        acc.args += tc.function?.arguments ?? "";
        calls.set(i, acc);
      }
    }
    const content = delta?.content ?? "";
    const thinking = delta?.reasoning_content ?? "";
    const logprobs = (choice.logprobs as { content?: unknown[] } | null | undefined)?.content;
    if (content || thinking || logprobs?.length) emit({ done: false, content, thinking, ...(logprobs?.length ? { logprobs } : {}) });
    if (!choice.finish_reason) return;
    const cutShort = choice.finish_reason === "length";
    if (calls) {
      // a call cut off inside its arguments by num_predict is no call: the answer ends for "length", as Ollama's does
      const whole = [...calls.entries()].sort(([a], [b]) => a - b).flatMap(([index, c]) => toolCall(index, c, cutShort));
      if (whole.length > 0) emit({ done: false, content: "", thinking: "", toolCalls: whole });
    }
    emit({ done: true, reason: cutShort ? "length" : "stop", timings: (event.timings ?? {}) as Timings });
  };
}

/** llama-server's own completion stream (/completion, /infill): `content` pieces, then `stop: true` with timings. */
export function completionDecoder(): Decoder {
  return (event, emit) => {
    if (event.error !== undefined) throw new StreamError(errorText(event.error));
    const content = typeof event.content === "string" ? event.content : "";
    if (content) emit({ done: false, content, thinking: "" });
    if (event.stop === true) emit({ done: true, reason: event.stop_type === "limit" ? "length" : "stop", timings: (event.timings ?? {}) as Timings });
  };
}

/** A whole tool call (none when `cutShort` left its arguments unfinished). */
function toolCall(index: number, c: { id: string; name: string; args: string }, cutShort: boolean): OllamaToolCall[] {
  let args: Record<string, unknown> = {};
  if (c.args.trim() !== "") {
    try {
      args = JSON.parse(c.args) as Record<string, unknown>;
    } catch {
      if (cutShort) return [];
      throw new StreamError(`llama-server returned invalid tool call arguments for "${c.name}": ${c.args.slice(0, 200)}`);
    }
  }
  return [{ ...(c.id ? { id: c.id } : {}), function: { index, name: c.name, arguments: args } }];
}

function errorText(e: unknown): string {
  if (typeof e === "string") return e;
  if (e && typeof e === "object" && typeof (e as { message?: unknown }).message === "string") return (e as { message: string }).message;
  return JSON.stringify(e);
}

/**
 * Names the model in an OpenAI or Anthropic answer (JSON, or an event stream of JSON lines) as
 * the client named it, where llama-server writes its own name for the instance (the preset
 * section, `llama3@latest`): clients match answers to the name they asked for. A `"model":"…"`
 * member cannot occur inside a JSON string (its quotes would be escaped), so the lines are
 * rewritten as text, whole lines at a time.
 */
export function modelRenamer(clientName: string): Transform {
  const named = `"model":${JSON.stringify(clientName)}`;
  const rename = (text: string) => text.replace(/"model":\s*"(?:[^"\\]|\\.)*"/g, named);
  const decoder = new StringDecoder("utf8");
  let partial = "";
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      const text = partial + decoder.write(chunk);
      const nl = text.lastIndexOf("\n");
      partial = text.slice(nl + 1);
      done(null, nl < 0 ? undefined : rename(text.slice(0, nl + 1)));
    },
    flush(done) {
      done(null, rename(partial + decoder.end()));
    },
  });
}
