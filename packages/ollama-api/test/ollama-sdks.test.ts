import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { embed, embedMany } from "ai";
import { createOllama } from "ollama-ai-provider-v2";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { userStore } from "./ollama-helpers";

/**
 * The client libraries issue #39 ran against `serve --all`, as a new user runs them: OpenAI's
 * (chat completions and the Responses API, as Codex uses it), Anthropic's (Messages, as Claude
 * Code uses it) and the Vercel AI SDK's Ollama provider. Each answer must name the model as the
 * client asked for it, and parse in the client's own schema.
 */
const temp = tempDirs();
let server: OllamaServer;

beforeAll(async () => {
  const root = await temp();
  const dir = await temp();
  await userStore(root, dir);
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
});
afterAll(async () => {
  await server?.stop();
});

describe("openai (chat completions, Responses API)", () => {
  const client = () => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "ollama", maxRetries: 0 });

  it("chat.completions, whole and streamed: the model named as the client named it", { timeout: 180_000 }, async () => {
    const r = await client().chat.completions.create({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], max_tokens: 3, temperature: 0 });
    expect(r.model).toBe("llama3.2");
    expect(r.choices[0]!.message.role).toBe("assistant");
    const names = new Set<string>();
    for await (const c of await client().chat.completions.create({ model: "llama3.2:latest", messages: [{ role: "user", content: "hi" }], max_tokens: 3, stream: true })) names.add(c.model);
    expect([...names]).toEqual(["llama3.2:latest"]);
  });

  it("completions and the Responses API name it so too", { timeout: 180_000 }, async () => {
    const c = await client().completions.create({ model: "llama3.2", prompt: "hi", max_tokens: 3 });
    expect(c.model).toBe("llama3.2");
    const r = await client().responses.create({ model: "llama3.2", input: "hi", max_output_tokens: 16 });
    expect(r.model).toBe("llama3.2");
    expect(r.status).toMatch(/completed|incomplete/);
  });
});

describe("@anthropic-ai/sdk (Messages)", () => {
  it("messages.create, whole and streamed: the model named as the client named it", { timeout: 180_000 }, async () => {
    const client = new Anthropic({ baseURL: server.url, apiKey: "ollama", maxRetries: 0 });
    const m = await client.messages.create({ model: "llama3.2", max_tokens: 3, messages: [{ role: "user", content: "hi" }] });
    expect(m.model).toBe("llama3.2");
    expect(m.role).toBe("assistant");
    const stream = client.messages.stream({ model: "llama3.2", max_tokens: 3, messages: [{ role: "user", content: "hi" }] });
    const final = await stream.finalMessage();
    expect(final.model).toBe("llama3.2");
  });
});

describe("ollama-ai-provider-v2 (Vercel AI SDK)", () => {
  it("embed and embedMany parse (load_duration on every answer, loaded model or not)", { timeout: 180_000 }, async () => {
    const ollama = createOllama({ baseURL: `${server.url}/api` });
    const one = await embed({ model: ollama.textEmbeddingModel("embeddinggemma"), value: "hello", maxRetries: 0 });
    expect(one.embedding.length).toBeGreaterThan(0);
    // the model is loaded now: Ollama still sends load_duration, and the provider's schema requires it
    const many = await embedMany({ model: ollama.textEmbeddingModel("embeddinggemma"), values: ["one", "two"], maxRetries: 0 });
    expect(many.embeddings).toHaveLength(2);
  });
});

describe("Ollama's smaller routes", () => {
  it("GET /api/status: no cloud; POST /api/me: nobody signed in", async () => {
    const status = await fetch(`${server.url}/api/status`);
    expect(status.status).toBe(200);
    expect(await status.json()).toEqual({ cloud: { disabled: true, source: expect.stringMatching(/^(config|env)$/) } });
    const me = await fetch(`${server.url}/api/me`, { method: "POST" });
    expect(me.status).toBe(401);
    expect(await me.json()).toEqual({ error: "unauthorized" });
  });

  it("/api/ps: size and size_vram from what llama.cpp allocated (this build runs on the CPU: 0 in VRAM)", { timeout: 180_000 }, async () => {
    await fetch(`${server.url}/api/generate`, { method: "POST", body: JSON.stringify({ model: "llama3.2", prompt: "hi", stream: false, options: { num_predict: 1 } }) });
    const { models } = (await (await fetch(`${server.url}/api/ps`)).json()) as { models: Array<{ name: string; size: number; size_vram: number }> };
    const m = models.find((x) => x.name === "llama3.2:latest")!;
    expect(m.size_vram).toBe(0);
    // the weights, the KV cache and the compute buffers: more than nothing, as llama.cpp printed them
    expect(m.size).toBeGreaterThan(0);
  });
});
