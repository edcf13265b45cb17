import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ollama, type Message, type Tool } from "ollama";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { ollamaTemplate, renderOllamaTemplate } from "../src/ollama-template";
import { llamaServerPath, tempDirs } from "./helpers";
import { TOOL_CALLING_OPTIONS, toolCallingFile, untemplatedLlamaFile } from "./ollama-helpers";

/**
 * Models whose GGUF has no chat template but whose manifest has a Go template layer, served by
 * a real llama-server: the capabilities come from the Go template (`.Tools` gives tools), and
 * chats are rendered with it (Ollama's rendering) and sent as a raw prompt, tool calls parsed
 * out of the output by Ollama's tools parser on the template's tool-call tag.
 */
const LLAMA31 = readFileSync(join(__dirname, "templates", "llama3.1.gotmpl"), "utf8");
const temp = tempDirs();
let server: OllamaServer;
let ollama: Ollama;

beforeAll(async () => {
  const root = await temp();
  const dir = await temp();
  const stop = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"];
  await buildOllamaStore(root, [
    { name: "gotools", model: await untemplatedLlamaFile(dir, 3), template: LLAMA31, params: { num_ctx: 1024, stop } },
    { name: "gocaller", model: await toolCallingFile(dir, null), template: LLAMA31, params: { num_ctx: 1024 } },
    { name: "notools", model: await untemplatedLlamaFile(dir, 4), template: "{{ range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n", params: { num_ctx: 512, stop } },
  ]);
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
  ollama = new Ollama({ host: server.url });
});
afterAll(async () => {
  await server?.stop();
});

const weather: Tool = {
  type: "function",
  function: { name: "get_weather", description: "Get the weather", parameters: { type: "object", properties: { city: { type: "string", description: "The city" } }, required: ["city"] } },
};
const messages: Message[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Paris?" },
];
const greedy = { temperature: 0, top_k: 1, seed: 1, num_predict: 4 };

const post = async (path: string, body: unknown) => {
  const r = await fetch(`${server.url}${path}`, { method: "POST", body: JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Record<string, unknown> };
};

describe("a Go template layer on a GGUF without a chat template", () => {
  it("/api/show lists tools for a template that reads .Tools, not for one that does not", async () => {
    expect((await ollama.show({ model: "gotools" })).capabilities).toEqual(["completion", "tools"]);
    expect((await ollama.show({ model: "notools" })).capabilities).toEqual(["completion"]);
    const refused = await post("/api/chat", { model: "notools", messages, tools: [weather], stream: false });
    expect(refused).toEqual({ status: 400, json: { error: '"notools:latest" does not support tools' } });
  });

  it("a chat with tools is answered, and the prompt is the Go template's rendering (_debug_render_only, as Ollama answers it)", { timeout: 300_000 }, async () => {
    const expected = renderOllamaTemplate(ollamaTemplate(LLAMA31), { messages: messages as unknown as Record<string, unknown>[], tools: [weather] });
    expect(expected).toContain('"name":"get_weather"'); // the tools' JSON, before the last user message
    const debug = await post("/api/chat", { model: "gotools", messages, tools: [weather], _debug_render_only: true });
    expect(debug.status).toBe(200);
    expect((debug.json.debug_info as { rendered_template: string }).rendered_template).toBe(expected);
    const answer = await ollama.chat({ model: "gotools", messages, tools: [weather], options: greedy });
    expect(answer.done).toBe(true);
    expect(answer.done_reason).toBe("length");
  });

  it("llama-server received exactly that prompt: the same token count and the same greedy words as the prompt sent raw", { timeout: 300_000 }, async () => {
    const expected = renderOllamaTemplate(ollamaTemplate(LLAMA31), { messages: messages as unknown as Record<string, unknown>[], tools: [weather] });
    const chat = await ollama.chat({ model: "gotools", messages, tools: [weather], options: greedy });
    const raw = await ollama.generate({ model: "gotools", prompt: expected, raw: true, options: greedy });
    expect(chat.prompt_eval_count).toBe(raw.prompt_eval_count);
    expect(chat.message.content).toBe(raw.response);
    // and not the prompt without the tools
    const without = await ollama.chat({ model: "gotools", messages, options: greedy });
    expect(without.prompt_eval_count).toBeLessThan(chat.prompt_eval_count);
  });

  it("/api/generate renders with the Go template too (system, then the prompt)", async () => {
    const debug = await post("/api/generate", { model: "gotools", prompt: "hi", system: "S", _debug_render_only: true });
    expect((debug.json.debug_info as { rendered_template: string }).rendered_template).toBe(
      "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
  });

  it("/api/generate takes a Go template of its own, as Ollama does; one Go would refuse is a 500 naming where", async () => {
    const debug = await post("/api/generate", { model: "gotools", prompt: "hi", template: "[{{ .System }}|{{ .Prompt }}]", _debug_render_only: true });
    expect((debug.json.debug_info as { rendered_template: string }).rendered_template).toBe("[|hi]");
    const bad = await post("/api/generate", { model: "gotools", prompt: "hi", template: "{{ if .Prompt }}x", stream: false });
    expect(bad).toEqual({ status: 500, json: { error: "template: parse error at line 1, column 18 (offset 17): unexpected EOF" } });
  });

  it("a tool call in the model's raw output comes back as tool_calls (Ollama's tools parser on the template's tag)", { timeout: 300_000 }, async () => {
    // the model writes the lowest token its grammar allows; the schema allows only this call
    const format = {
      type: "object",
      properties: { name: { const: "get_weather" }, parameters: { type: "object", properties: { city: { const: "Paris" } }, required: ["city"] } },
      required: ["name", "parameters"],
    };
    const answer = await ollama.chat({ model: "gocaller", messages, tools: [weather], format, options: { ...TOOL_CALLING_OPTIONS, num_predict: 60 } });
    expect({ calls: answer.message.tool_calls, content: answer.message.content.trim() }).toEqual({ calls: [{ function: { index: 0, name: "get_weather", arguments: { city: "Paris" } } }], content: "" });
  });
});
