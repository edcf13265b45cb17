import { parseKeepAlive } from "./duration";
import { ApiError, badRequest } from "./errors";
import type { ApiModel } from "./models";
import { ollamaTemplate, renderOllamaTemplate, type OllamaTemplate } from "./ollama-template";
import { goRenderingFor, promptField, renderedDecoder, thinkValues } from "./rendered";
import { samplingFields } from "./options";
import type { AnswerRequest, AnswerShape } from "./respond";
import { chatDecoder, completionDecoder } from "./stream";

type Json = Record<string, unknown>;

/** What every generating request shares: model, stream, keep_alive, options, format, think. */
interface Common {
  keepAliveMs?: number;
  stream: boolean;
  created: () => string;
}

function common(body: Json): Common {
  if (body.stream !== undefined && typeof body.stream !== "boolean") throw badRequest("stream: expected a boolean");
  return { keepAliveMs: parseKeepAlive(body.keep_alive), stream: body.stream !== false, created: now };
}

/** llama-server's response_format for Ollama's `format`: "json", a JSON schema, or nothing. */
function responseFormat(format: unknown): Json | undefined {
  if (format === undefined || format === null || format === "") return undefined;
  if (format === "json") return { type: "json_object" };
  if (typeof format === "object" && !Array.isArray(format)) return { type: "json_schema", json_schema: { name: "schema", schema: format } };
  throw badRequest(`invalid format: ${JSON.stringify(format)}; expected "json" or a valid JSON Schema object`);
}

/**
 * `think` as llama-server takes it. Ollama turns thinking on for a model that can think when a
 * request does not say, and refuses it for one that cannot. On: `enable_thinking` for the chat
 * template, and a level ("low", "medium", "high", "max") as llama-server's `reasoning_effort`,
 * which it hands to templates that take one (gpt-oss's harmony knows low to high, so "max" is
 * "high" there, as in Ollama); llama-server returns the reasoning as `reasoning_content`, which
 * becomes `thinking`. Off: `enable_thinking` false, so templates that can close the thinking
 * section do so in the prompt.
 */
function thinkFields(think: unknown, m: ApiModel, caps: string[]): Json {
  if (think !== undefined && think !== null && typeof think !== "boolean" && !["high", "medium", "low", "max"].includes(think as string)) {
    throw badRequest(`invalid think value: ${JSON.stringify(think)} (must be "high", "medium", "low", "max", true, or false)`);
  }
  const canThink = caps.includes("thinking");
  if (think === undefined || think === null) return canThink ? { chat_template_kwargs: { enable_thinking: true } } : {};
  if (think !== false && !canThink) throw badRequest(`"${m.name}" does not support thinking`);
  if (typeof think !== "string") return { chat_template_kwargs: { enable_thinking: think } };
  const level = think === "max" && /^gpt-?oss$/.test(m.prepared.architecture) ? "high" : think;
  return { chat_template_kwargs: { enable_thinking: true }, reasoning_effort: level };
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** An `images` entry as an OpenAI content part (a data URI whose type is read from the bytes). */
function imagePart(image: unknown, where: string): Json {
  if (typeof image !== "string" || !BASE64.test(image)) throw badRequest(`${where}: expected base64-encoded image data`);
  const head = Buffer.from(image.slice(0, 24), "base64");
  const mime =
    head[0] === 0x89 && head[1] === 0x50 ? "image/png"
    : head[0] === 0xff && head[1] === 0xd8 ? "image/jpeg"
    : head.subarray(0, 4).toString("latin1") === "GIF8" ? "image/gif"
    : head.subarray(8, 12).toString("latin1") === "WEBP" ? "image/webp"
    : head.subarray(0, 2).toString("latin1") === "BM" ? "image/bmp"
    : "image/jpeg";
  return { type: "image_url", image_url: { url: `data:${mime};base64,${image}` } };
}

/** An Ollama chat message as an OpenAI one (api.Message → llama-server's /v1/chat/completions). */
function chatMessage(raw: unknown, i: number): Json {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw badRequest(`messages[${i}]: expected an object`);
  const m = raw as Json;
  if (typeof m.role !== "string") throw badRequest(`messages[${i}].role: expected a string`);
  if (m.content !== undefined && m.content !== null && typeof m.content !== "string") throw badRequest(`messages[${i}].content: expected a string`);
  const out: Json = { role: m.role.toLowerCase() };
  const content = (m.content as string | undefined) ?? "";
  const images = m.images ?? [];
  if (!Array.isArray(images)) throw badRequest(`messages[${i}].images: expected an array of base64 strings`);
  out.content = images.length === 0 ? content : [...(content ? [{ type: "text", text: content }] : []), ...images.map((im, j) => imagePart(im, `messages[${i}].images[${j}]`))];
  if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((tc: { id?: string; function?: { index?: number; name?: string; arguments?: unknown } }, j: number) => ({
      ...(tc.id ? { id: tc.id } : {}),
      index: tc.function?.index ?? j,
      type: "function",
      function: { name: tc.function?.name ?? "", arguments: JSON.stringify(tc.function?.arguments ?? {}) },
    }));
  }
  if (typeof m.tool_name === "string" && m.tool_name) out.name = m.tool_name;
  if (typeof m.tool_call_id === "string" && m.tool_call_id) out.tool_call_id = m.tool_call_id;
  return out;
}

/** Fields every chat-completion request to llama-server carries. */
function chatBody(m: ApiModel, caps: string[], body: Json, messages: Json[]): Json {
  const out: Json = { model: m.name, messages, stream: true, cache_prompt: true, ...samplingFields(m.prepared.resolved.params, body.options) };
  const format = responseFormat(body.format);
  if (format) out.response_format = format;
  Object.assign(out, thinkFields(body.think, m, caps));
  if (body.logprobs === true) {
    const top = body.top_logprobs ?? 0;
    if (typeof top !== "number" || top < 0 || top > 20) throw badRequest("top_logprobs must be between 0 and 20");
    Object.assign(out, { logprobs: true, top_logprobs: Math.max(1, top) });
  }
  return out;
}

/**
 * Consecutive user messages as one, for a chat template that refuses two in a row (gemma3's
 * raises "Conversation roles must alternate"), where Ollama's Go template renders each as a
 * turn of its own: LangChain sends an image as a user message after the text. The texts are
 * joined by a blank line, the images kept in order.
 */
function mergeUserRuns(messages: Json[]): Json[] {
  const parts = (c: unknown): Json[] => (Array.isArray(c) ? (c as Json[]) : c ? [{ type: "text", text: c }] : []);
  const out: Json[] = [];
  for (const m of messages) {
    const prev = out.at(-1);
    if (m.role !== "user" || prev?.role !== "user") {
      out.push(m);
      continue;
    }
    out[out.length - 1] =
      typeof prev.content === "string" && typeof m.content === "string"
        ? { ...prev, content: [prev.content, m.content].filter((t) => t !== "").join("\n\n") }
        : { ...prev, content: [...parts(prev.content), ...parts(m.content)] };
  }
  return out;
}

/**
 * The model's messages layer before the conversation, and its system prompt first unless the
 * conversation starts with one (Ollama's ChatHandler: `append(m.Messages, req.Messages...)`).
 * `generate`: a request's own system prompt stays first, the layer's turns after it, as
 * Ollama's GenerateHandler orders them.
 */
function withSystem(m: ApiModel, messages: Json[], generate = false): Json[] {
  const { system, messages: turns = [] } = m.prepared.resolved;
  const own = messages[0]?.role === "system";
  if (generate && own) return [messages[0]!, ...turns, ...messages.slice(1)];
  const all = [...turns, ...messages];
  if (!system || own) return all;
  return [{ role: "system", content: system }, ...all];
}

function requireCompletion(m: ApiModel, caps: string[], what: "chat" | "generate"): void {
  if (!caps.includes("completion")) throw badRequest(`"${m.name}" does not support ${what}`);
}

/**
 * A request that only loads or unloads the model (no messages / empty prompt), or that asks
 * only for the prompt it would send (`_debug_render_only`, answered without loading anything).
 */
export type Housekeeping = { kind: "load" | "unload" | "render"; keepAliveMs?: number; reply: Json };

/** llama-server's /completion body for a prompt already rendered (`raw`, or by the Go template): format as its json_schema. */
function completionBody(m: ApiModel, prompt: string | Json, body: Json, sampling: Json): Json {
  const format = responseFormat(body.format);
  const json = format?.type === "json_object" ? { json_schema: {} } : format ? { json_schema: (format.json_schema as Json).schema } : {};
  return { model: m.name, prompt, stream: true, cache_prompt: true, ...sampling, ...json };
}

/**
 * A conversation rendered with the model's Go template, as Ollama renders it (the messages as
 * the API has them, the tools, think), sent to llama-server as a raw prompt; with
 * `_debug_render_only` the prompt itself is the answer, as in Ollama.
 */
function renderedRequest(m: ApiModel, t: OllamaTemplate, caps: string[], body: Json, messages: Json[], tools: unknown[] | undefined, keepAliveMs: number | undefined, stream: boolean, shape: AnswerShape): AnswerRequest | Housekeeping {
  thinkFields(body.think, m, caps); // the same refusals as a chat rendered by llama-server
  const think = thinkValues(body.think ?? (caps.includes("thinking") ? true : undefined));
  const prompt = renderOllamaTemplate(t, { messages, tools, ...think });
  const decoder = renderedDecoder(t, prompt, think.think === true, tools);
  const images = messages.flatMap((msg) => (Array.isArray(msg.images) ? (msg.images as string[]) : []));
  if (body._debug_render_only === true) return { kind: "render", reply: { model: m.name, created_at: now(), debug_info: { rendered_template: prompt, ...(images.length ? { image_count: images.length } : {}) } } };
  images.forEach((im, j) => imagePart(im, `images[${j}]`));
  const sampling = samplingFields(m.prepared.resolved.params, body.options);
  return { model: m.name, keepAliveMs, stream, path: "/completion", body: completionBody(m, promptField(prompt, images), body, sampling), decoder, shape };
}

/** A Go template given in a generate request, used instead of the model's; one Go refuses is a 500 with the parser's error, as in Ollama. */
function requestTemplate(text: string): OllamaTemplate | undefined {
  if (text === "") return undefined;
  try {
    return ollamaTemplate(text);
  } catch (e) {
    throw new ApiError(500, e instanceof Error ? e.message : String(e));
  }
}

/** The API's messages as the template reads them (api.Message: roles in lower case), each checked as for llama-server. */
function apiMessages(raw: unknown[]): Json[] {
  return raw.map((r, i) => {
    chatMessage(r, i);
    const msg = r as Json;
    return { ...msg, role: String(msg.role).toLowerCase() };
  });
}

/** POST /api/chat as llama-server's /v1/chat/completions. */
export async function chatRequest(m: ApiModel, body: Json): Promise<AnswerRequest | Housekeeping> {
  const c = common(body);
  if (body.messages !== undefined && body.messages !== null && !Array.isArray(body.messages)) throw badRequest("messages: expected an array");
  const raw = (body.messages as unknown[] | undefined) ?? [];
  const base = { model: m.name, created_at: c.created(), message: { role: "assistant", content: "" }, done: true };
  if (raw.length === 0) return { kind: c.keepAliveMs === 0 ? "unload" : "load", keepAliveMs: c.keepAliveMs, reply: { ...base, done_reason: c.keepAliveMs === 0 ? "unload" : "load" } };
  const facts = await m.facts;
  const caps = facts.capabilities;
  requireCompletion(m, caps, "chat");
  const tools = Array.isArray(body.tools) && body.tools.length > 0 ? (body.tools as unknown[]) : undefined;
  if (tools && !caps.includes("tools")) throw badRequest(`"${m.name}" does not support tools`);
  const go = goRenderingFor(facts, tools !== undefined);
  if (go) return renderedRequest(m, go, caps, body, withSystem(m, apiMessages(raw)), tools, c.keepAliveMs, c.stream, chatShape(m.name));
  const messages = raw.map(chatMessage);
  const upstreamBody = chatBody(m, caps, body, withSystem(m, facts.alternating ? mergeUserRuns(messages) : messages));
  if (tools) upstreamBody.tools = tools;
  return {
    model: m.name,
    keepAliveMs: c.keepAliveMs,
    stream: c.stream,
    path: "/v1/chat/completions",
    body: upstreamBody,
    decoder: chatDecoder,
    shape: chatShape(m.name),
  };
}

/**
 * An NDJSON line is built from a prefix made once per answer: one string per token, no object
 * to build and stringify (this runs once per token).
 */
const lineHead = (model: string) => `{"model":${JSON.stringify(model)},"created_at":"`;

/** Now as toISOString says it, formatted whole once a second: created_at is on every line. */
let second = -1;
let secondText = "";
function now(): string {
  const t = Date.now();
  const ms = t % 1000;
  if (t - ms !== second) {
    second = t - ms;
    secondText = new Date(second).toISOString().slice(0, 20); // "2026-12-01T23:37:47."
  }
  return `${secondText}${ms < 10 ? "00" : ms < 100 ? "0" : ""}${ms}Z`;
}

/** api.ChatResponse: `message` with content, thinking and tool calls. */
function chatShape(model: string): AnswerShape {
  const head = lineHead(model);
  return {
    piece: (p) =>
      `${head}${now()}","message":{"role":"assistant","content":${JSON.stringify(p.content)}${p.thinking ? `,"thinking":${JSON.stringify(p.thinking)}` : ""}${p.toolCalls ? `,"tool_calls":${JSON.stringify(p.toolCalls)}` : ""}}${p.logprobs ? `,"logprobs":${JSON.stringify(p.logprobs)}` : ""},"done":false}\n`,
    final: (f, whole) => ({
      model,
      created_at: now(),
      message: {
        role: "assistant",
        content: whole?.content ?? "",
        ...(whole?.thinking ? { thinking: whole.thinking } : {}),
        ...(whole?.toolCalls.length ? { tool_calls: whole.toolCalls } : {}),
      },
      ...(whole?.logprobs.length ? { logprobs: whole.logprobs } : {}),
      done: true,
      done_reason: f.reason,
    }),
  };
}

/** api.GenerateResponse: `response` and `thinking`. */
function generateShape(model: string): AnswerShape {
  const head = lineHead(model);
  return {
    piece: (p) => `${head}${now()}","response":${JSON.stringify(p.content)}${p.thinking ? `,"thinking":${JSON.stringify(p.thinking)}` : ""}${p.logprobs ? `,"logprobs":${JSON.stringify(p.logprobs)}` : ""},"done":false}\n`,
    final: (f, whole) => ({
      model,
      created_at: now(),
      response: whole?.content ?? "",
      ...(whole?.thinking ? { thinking: whole.thinking } : {}),
      ...(whole?.logprobs.length ? { logprobs: whole.logprobs } : {}),
      done: true,
      done_reason: f.reason,
    }),
  };
}

/**
 * POST /api/generate: a prompt with the model's template (as a one-turn chat: system, then the
 * prompt and its images), a raw prompt (llama-server's /completion), or a prompt with a suffix
 * (fill-in-the-middle: /infill).
 */
export async function generateRequest(m: ApiModel, body: Json): Promise<AnswerRequest | Housekeeping> {
  const c = common(body);
  const str = (k: string): string => {
    const v = body[k];
    if (v !== undefined && v !== null && typeof v !== "string") throw badRequest(`${k}: expected a string`);
    return (v as string | undefined) ?? "";
  };
  const prompt = str("prompt");
  const suffix = str("suffix");
  const system = str("system");
  const base = { model: m.name, created_at: c.created(), response: "", done: true };
  if (prompt === "" && suffix === "") return { kind: c.keepAliveMs === 0 ? "unload" : "load", keepAliveMs: c.keepAliveMs, reply: { ...base, done_reason: c.keepAliveMs === 0 ? "unload" : "load" } };
  if (body.raw === true && (str("template") !== "" || system !== "" || Array.isArray(body.context))) throw badRequest("raw mode does not support template, system, or context");
  const override = requestTemplate(str("template"));
  const facts = await m.facts;
  const caps = facts.capabilities;
  requireCompletion(m, caps, "generate");
  const images = body.images ?? [];
  if (!Array.isArray(images)) throw badRequest("images: expected an array of base64 strings");
  const sampling = samplingFields(m.prepared.resolved.params, body.options);
  const request = { model: m.name, keepAliveMs: c.keepAliveMs, stream: c.stream, shape: generateShape(m.name) };
  if (suffix !== "") {
    // Ollama checks the insert capability (a Go template with .Suffix, and fill-in-the-middle tokens) before it loads anything
    if (!caps.includes("insert")) throw badRequest(`"${m.name}" does not support insert`);
    return { ...request, path: "/infill", body: { model: m.name, input_prefix: prompt, input_suffix: suffix, stream: true, cache_prompt: true, ...sampling }, decoder: completionDecoder };
  }
  if (body.raw === true) {
    // llama-server's media marker stands where Ollama's [img-N] tags were, else before the text
    const tagged = images.length === 0 || /\[img-\d+\]/.test(prompt) ? prompt : images.map((_, j) => `[img-${j}]`).join("") + prompt;
    images.forEach((im, j) => imagePart(im, `images[${j}]`));
    return { ...request, path: "/completion", body: completionBody(m, promptField(tagged, images as string[]), body, sampling), decoder: completionDecoder };
  }
  const user: Json = { role: "user", content: prompt, ...(images.length ? { images } : {}) };
  const go = override ?? goRenderingFor(facts, false);
  if (go) return renderedRequest(m, go, caps, body, withSystem(m, apiMessages([...(system ? [{ role: "system", content: system }] : []), user]), true), undefined, c.keepAliveMs, c.stream, request.shape);
  const messages = withSystem(m, [...(system ? [{ role: "system", content: system }] : []), user].map(chatMessage), true);
  return { ...request, path: "/v1/chat/completions", body: chatBody(m, caps, body, messages), decoder: chatDecoder };
}

export function isHousekeeping(r: AnswerRequest | Housekeeping): r is Housekeeping {
  return "kind" in r;
}
