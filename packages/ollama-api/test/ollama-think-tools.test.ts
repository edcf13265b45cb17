import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ollama, type Message, type Tool } from "ollama";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile, thinkingFile, TOOL_CALLING_OPTIONS, toolCallingFile } from "./ollama-helpers";

/**
 * `think` and tool calls through the Ollama API, on models whose chat templates have a thinking
 * section and a tool-call format: llama-server renders, constrains and parses, the API returns
 * Ollama's `thinking` and `tool_calls`.
 */
const temp = tempDirs();
let server: OllamaServer;
let ollama: Ollama;

beforeAll(async () => {
  const root = await temp();
  const dir = await temp();
  await buildOllamaStore(root, [
    { name: "thinker", model: await thinkingFile(dir), params: { num_ctx: 512 } },
    { name: "caller", model: await toolCallingFile(dir), params: { num_ctx: 1024 } },
    { name: "plain", model: await llamaFile(dir), params: { num_ctx: 512 } },
  ]);
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
  ollama = new Ollama({ host: server.url });
});
afterAll(async () => {
  await server?.stop();
});

const greedy = { temperature: 0, num_predict: 6 };
const hi: Message[] = [{ role: "user", content: "hi" }];

describe("think", () => {
  it("show: a template with a thinking section gives the thinking capability", async () => {
    expect((await ollama.show({ model: "thinker" })).capabilities).toEqual(expect.arrayContaining(["completion", "thinking"]));
    expect((await ollama.show({ model: "plain" })).capabilities).not.toContain("thinking");
  });

  it("true (and unset, as Ollama defaults for a model that thinks): the words are message.thinking; false: they are the content", async () => {
    const on = await ollama.chat({ model: "thinker", messages: hi, think: true, options: greedy });
    expect(on.message.thinking!.length).toBeGreaterThan(0);
    expect(on.message.content).toBe("");
    const unset = await ollama.chat({ model: "thinker", messages: hi, options: greedy });
    expect(unset.message.thinking).toBe(on.message.thinking);
    const off = await ollama.chat({ model: "thinker", messages: hi, think: false, options: greedy });
    expect(off.message.thinking).toBeUndefined();
    expect(off.message.content.length).toBeGreaterThan(0);
    // the template closed the thinking section in the prompt
    expect(off.prompt_eval_count).toBeGreaterThan(on.prompt_eval_count);
  });

  it("streamed: the pieces carry message.thinking; generate returns `thinking`", async () => {
    let thinking = "";
    for await (const p of await ollama.chat({ model: "thinker", messages: hi, think: true, stream: true, options: greedy })) {
      thinking += p.message.thinking ?? "";
      if (!p.done) expect(p.message.content).toBe("");
    }
    const whole = await ollama.chat({ model: "thinker", messages: hi, think: true, options: greedy });
    expect(thinking).toBe(whole.message.thinking);
    const g = await ollama.generate({ model: "thinker", prompt: "hi", think: true, options: greedy });
    expect(g.thinking!.length).toBeGreaterThan(0);
    expect(g.response).toBe("");
    let streamed = "";
    for await (const p of await ollama.generate({ model: "thinker", prompt: "hi", think: true, stream: true, options: greedy })) streamed += p.thinking ?? "";
    expect(streamed).toBe(g.thinking);
  });

  it('levels ("low", "medium", "high", "max") reach the template as its reasoning effort', async () => {
    // the ollama client's types stop at "high"; Ollama takes "max" too
    const count = async (think: "low" | "medium" | "high" | "max") => (await ollama.chat({ model: "thinker", messages: hi, think: think as "high", options: greedy })).prompt_eval_count;
    const low = await count("low");
    const high = await count("high");
    const on = (await ollama.chat({ model: "thinker", messages: hi, think: true, options: greedy })).prompt_eval_count;
    expect(low).toBeGreaterThan(on); // a "Reasoning: low" system turn
    expect(high).toBeGreaterThan(low); // the template says more for "high"
    expect(await count("max")).toBeGreaterThan(on);
    expect(await count("medium")).toBeGreaterThan(on);
  });

  it("a model that cannot think refuses think true or a level, and takes false", async () => {
    const refused = await fetch(`${server.url}/api/chat`, { method: "POST", body: JSON.stringify({ model: "plain", messages: hi, think: "high" }) });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: string }).error).toBe('"plain:latest" does not support thinking');
    expect((await ollama.chat({ model: "plain", messages: hi, think: false, options: greedy })).done).toBe(true);
    const bad = await fetch(`${server.url}/api/chat`, { method: "POST", body: JSON.stringify({ model: "thinker", messages: hi, think: "hard" }) });
    expect(bad.status).toBe(400);
  });
});

const weather: Tool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris"] } }, required: ["city"] },
  },
};
const question: Message[] = [{ role: "user", content: "What is the weather in Paris?" }];

describe("tool calls, end to end", () => {
  it("show: the template's tool-call format gives the tools capability", async () => {
    expect((await ollama.show({ model: "caller" })).capabilities).toEqual(expect.arrayContaining(["completion", "tools"]));
  });

  it("not streamed: message.tool_calls in Ollama's shape (function.index, name, arguments as an object)", { timeout: 120_000 }, async () => {
    const r = await ollama.chat({ model: "caller", messages: question, tools: [weather], options: TOOL_CALLING_OPTIONS });
    expect(r.done).toBe(true);
    expect(r.done_reason).toBe("stop");
    expect(r.message.content).toBe("");
    expect(r.message.tool_calls).toHaveLength(1);
    expect(r.message.tool_calls![0]).toMatchObject({ function: { index: 0, name: "get_weather", arguments: { city: "Paris" } } });
  });

  it("streamed: one piece with the tool calls, then the last object", { timeout: 120_000 }, async () => {
    const parts = [];
    for await (const p of await ollama.chat({ model: "caller", messages: question, tools: [weather], stream: true, options: TOOL_CALLING_OPTIONS })) parts.push(p);
    const withCalls = parts.filter((p) => p.message.tool_calls?.length);
    expect(withCalls).toHaveLength(1);
    expect(withCalls[0]!.done).toBe(false);
    expect(withCalls[0]!.message.tool_calls![0]!.function).toEqual({ index: 0, name: "get_weather", arguments: { city: "Paris" } });
    expect(parts.at(-1)!.done).toBe(true);
    expect(parts.at(-1)!.eval_count).toBeGreaterThan(10);
  });

  it("a call cut off by num_predict inside its arguments ends the answer for \"length\" (no 500), streamed or not", { timeout: 120_000 }, async () => {
    const options = { ...TOOL_CALLING_OPTIONS, num_predict: 30 };
    const r = await ollama.chat({ model: "caller", messages: question, tools: [weather], options });
    expect(r.done).toBe(true);
    expect(r.done_reason).toBe("length");
    expect(r.message.tool_calls ?? []).toEqual([]);
    const parts = [];
    for await (const p of await ollama.chat({ model: "caller", messages: question, tools: [weather], stream: true, options })) parts.push(p);
    expect(parts.at(-1)).toMatchObject({ done: true, done_reason: "length" });
  });

  it("the follow-up: the assistant's tool call and a `tool` message with the result are taken into the prompt and answered", { timeout: 120_000 }, async () => {
    const first = await ollama.chat({ model: "caller", messages: question, tools: [weather], options: TOOL_CALLING_OPTIONS });
    const call = first.message.tool_calls![0]!;
    const followUp: Message[] = [...question, { role: "assistant", content: "", tool_calls: [call] }, { role: "tool", content: "sunny, 22 degrees", tool_name: "get_weather" } as Message];
    const r = await ollama.chat({ model: "caller", messages: followUp, tools: [weather], options: TOOL_CALLING_OPTIONS });
    expect(r.done).toBe(true);
    // the call and its result are in the prompt now
    expect(r.prompt_eval_count).toBeGreaterThan(first.prompt_eval_count + 20);
    // without tools, the same conversation is answered as text
    const plain = await ollama.chat({ model: "caller", messages: followUp, options: { ...TOOL_CALLING_OPTIONS, num_predict: 3 } });
    expect(plain.done).toBe(true);
    expect(plain.message.tool_calls).toBeUndefined();
  });
});
