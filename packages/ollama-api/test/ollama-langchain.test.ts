import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { ChatOllama, OllamaEmbeddings } from "@langchain/ollama";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { toolCallingFile, userStore } from "./ollama-helpers";

/**
 * LangChain's Ollama integration (@langchain/ollama: ChatOllama, OllamaEmbeddings), the second
 * real client, as the user ran it: ChatOllama always streams and sends its whole option
 * set (num_ctx among them when set), OllamaEmbeddings retries a failed call for minutes.
 */
const temp = tempDirs();
let server: OllamaServer;

beforeAll(async () => {
  const root = await temp();
  const dir = await temp();
  await userStore(root, dir, [{ name: "caller", model: await toolCallingFile(dir), params: { num_ctx: 1024 } }]);
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
});
afterAll(async () => {
  await server?.stop();
});

describe("@langchain/ollama against serveOllama", () => {
  it("ChatOllama invoke: an AIMessage with the answer and Ollama's metadata", async () => {
    const chat = new ChatOllama({ baseUrl: server.url, model: "llama3.2", temperature: 0, numPredict: 5 });
    const r = await chat.invoke([new HumanMessage("hello")]);
    // the protocol, not the words: a random-weight model may end at its first token
    const got = JSON.stringify(r);
    expect(r).toBeInstanceOf(AIMessage);
    expect(typeof r.content, got).toBe("string");
    expect(r.response_metadata, got).toMatchObject({ model: "llama3.2:latest", done: true, done_reason: expect.stringMatching(/^(stop|length)$/) });
    expect(r.usage_metadata!.output_tokens, got).toBeLessThanOrEqual(5);
    expect(r.usage_metadata!.input_tokens, got).toBeGreaterThan(0);
  });

  it("ChatOllama stream: the pieces add up to the same answer", async () => {
    const chat = new ChatOllama({ baseUrl: server.url, model: "llama3.2", temperature: 0, numPredict: 5 });
    const whole = (await chat.invoke("hello")).content;
    let text = "";
    let chunks = 0;
    for await (const c of await chat.stream("hello")) {
      text += c.content as string;
      chunks++;
    }
    expect(chunks).toBeGreaterThan(2);
    expect(text).toBe(whole);
  });

  it("ChatOllama with numCtx: the model runs with that context", async () => {
    const long = Array.from({ length: 150 }, (_, i) => `word${i}`).join(" ");
    const chat = new ChatOllama({ baseUrl: server.url, model: "llama3.2", temperature: 0, numPredict: 2, numCtx: 2048 });
    const r = await chat.invoke(long);
    expect(r.usage_metadata!.input_tokens).toBeGreaterThan(512); // the params layer's num_ctx is 512
  });

  it("ChatOllama bindTools: the tool call comes back as LangChain's tool_calls, and the ToolMessage round trip is answered", { timeout: 180_000 }, async () => {
    const chat = new ChatOllama({ baseUrl: server.url, model: "caller", temperature: 0, topK: 0, topP: 1, numPredict: 200 });
    const weather = { type: "function" as const, function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris"] } }, required: ["city"] } } };
    const withTools = chat.bindTools([weather]);
    const question = new HumanMessage("What is the weather in Paris?");
    const r = await withTools.invoke([question]);
    expect(r.tool_calls).toHaveLength(1);
    expect(r.tool_calls![0]).toMatchObject({ name: "get_weather", args: { city: "Paris" } });
    const answer = await withTools.invoke([question, r, new ToolMessage({ content: "sunny, 22 degrees", tool_call_id: r.tool_calls![0]!.id ?? "call-0" })]);
    expect(answer.response_metadata).toMatchObject({ done: true });
  });

  it("OllamaEmbeddings: embedQuery and embedDocuments answered on the first try, unit-length vectors", async () => {
    // the user saw it retry for 103 s; with maxRetries 0 any failed call throws instead
    const e = new OllamaEmbeddings({ baseUrl: server.url, model: "embeddinggemma", maxRetries: 0 });
    const q = await e.embedQuery("hello");
    expect(q.length).toBeGreaterThan(0);
    expect(Math.hypot(...q)).toBeCloseTo(1, 5);
    const docs = await e.embedDocuments(["one", "two", "three"]);
    expect(docs).toHaveLength(3);
    for (const v of docs) expect(v).toHaveLength(q.length);
  });
});
