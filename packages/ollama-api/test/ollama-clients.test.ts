import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { join } from "node:path";
import { readGguf, writeGguf } from "@compat/gguf";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile, userStore, PRINTABLE } from "./ollama-helpers";

/**
 * The requests real front ends send to Ollama, replayed as they build them, against
 * serveOllama with real llama-server models:
 * - Open WebUI: backend/open_webui/routers/ollama.py (open-webui/open-webui)
 * - Continue: core/llm/llms/Ollama.ts (continuedev/continue)
 * - VS Code Copilot Chat's Ollama provider: src/extension/byok/vscode-node/ollamaProvider.ts (microsoft/vscode-copilot-chat)
 */
const temp = tempDirs();
let server: OllamaServer;

/** A chat template that handles tools (ChatML with Hermes-style tool calls), on the llama fixture. */
const TOOLS_TEMPLATE =
  "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\nCall one with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n{%- endif %}" +
  "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";

beforeAll(async () => {
  const root = await temp();
  const dir = await temp();
  const tools = join(dir, "tools.gguf");
  const m = await readGguf(await llamaFile(dir, 7));
  m.setString("tokenizer.chat_template", TOOLS_TEMPLATE);
  // fill-in-the-middle tokens, which llama-server's /infill needs (any three of the vocabulary)
  for (const [i, kind] of ["pre", "suf", "mid"].entries()) m.setU32(`tokenizer.ggml.fim_${kind}_token_id`, 100 + i);
  await writeGguf(m, tools);
  await m.close();
  await userStore(root, dir, [{ name: "qwen2.5-coder:1.5b", model: tools, params: { num_ctx: 512 }, template: "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>{{ else }}{{ .Prompt }}{{ end }}" }]);
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
});
afterAll(async () => {
  await server?.stop();
});

async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${server.url}${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body) });
}

/** The NDJSON lines of a streamed answer. */
async function lines(r: Response): Promise<Array<Record<string, unknown>>> {
  return (await r.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("Open WebUI (backend/open_webui/routers/ollama.py)", () => {
  it("version (lowest of its connections, parsed as numbers), tags, ps, show", async () => {
    const v = (await (await fetch(`${server.url}/api/version`)).json()) as { version: string };
    // get_ollama_versions: tuple(map(int, re.sub(r"^v|-.*", "", version).split(".")))
    expect(v.version.replace(/^v|-.*/g, "").split(".").map(Number).every(Number.isInteger)).toBe(true);
    const tags = (await (await fetch(`${server.url}/api/tags`, { headers: { "Content-Type": "application/json" } })).json()) as { models: Array<{ model: string; name: string }> };
    // merge_ollama_models_lists keys on model["model"]; get_ollama_url looks names up with ":latest" added
    expect(tags.models.map((m) => m.model)).toContain("llama3.2:latest");
    expect(((await (await fetch(`${server.url}/api/ps`)).json()) as { models: unknown[] }).models).toBeInstanceOf(Array);
    const show = await post("/api/show", { model: "llama3.2:latest" });
    expect(show.status).toBe(200);
  });

  it("chat: GenerateChatCompletionForm dumped without None fields, streamed as application/x-ndjson", async () => {
    const r = await post("/api/chat", { model: "llama3.2:latest", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hello" }], options: { temperature: 0, num_predict: 4 }, stream: true, keep_alive: "5m" });
    expect(r.status, await r.clone().text()).toBe(200);
    expect(r.headers.get("content-type")).toBe("application/x-ndjson");
    const out = await lines(r);
    expect(out.at(-1)).toMatchObject({ done: true, model: "llama3.2:latest" });
    // JSON mode (format: "json") and a JSON schema
    for (const format of ["json", { type: "object", properties: { a: { type: "string" } } }]) {
      const j = await post("/api/chat", { model: "llama3.2:latest", messages: [{ role: "user", content: "json please" }], format, options: { temperature: 0, num_predict: 4 }, stream: false });
      expect(j.status, await j.clone().text()).toBe(200);
    }
  });

  it("title generation (generate, not streamed), embeddings for RAG (embed with truncate), unload (generate, keep_alive 0, empty prompt)", async () => {
    const title = (await (await post("/api/generate", { model: "llama3.2:latest", prompt: "Give a title", stream: false, options: { num_predict: 4 } })).json()) as { response: string; done: boolean };
    expect(title, JSON.stringify(title)).toMatchObject({ done: true, response: expect.any(String) });
    const e = (await (await post("/api/embed", { model: "embeddinggemma:latest", input: ["a", "b", "c"], truncate: true })).json()) as { embeddings: number[][] };
    expect(e.embeddings).toHaveLength(3);
    const unload = (await (await post("/api/generate", { model: "llama3.2:latest", keep_alive: 0, prompt: "" })).json()) as { done_reason: string };
    expect(unload.done_reason).toBe("unload");
  });

  it("the OpenAI side it also calls: /v1/chat/completions, streamed", async () => {
    const r = await post("/v1/chat/completions", { model: "llama3.2:latest", messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 3, grammar: PRINTABLE });
    const sse = await r.text();
    expect(r.status, sse).toBe(200);
    expect(sse).toContain("data: [DONE]");
  });
});

describe("Continue (core/llm/llms/Ollama.ts)", () => {
  it("ensureModelInfo: /api/show by name, its parameters parsed line by line into num_ctx and stop, .Suffix in the template means FIM", async () => {
    const body = (await (await post("/api/show", { name: "llama3.2" })).json()) as { parameters: string; template: string };
    let numCtx: number | undefined;
    const stop: string[] = [];
    for (const line of body.parameters.split("\n")) {
      const parts = line.match(/^(\S+)\s+((?:".*")|\S+)$/);
      if (!parts) continue;
      if (parts[1] === "num_ctx") numCtx = Number.parseInt(parts[2]!);
      if (parts[1] === "stop") stop.push(JSON.parse(parts[2]!) as string);
    }
    expect(numCtx).toBe(512);
    expect(stop).toEqual(["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]);
    const coder = (await (await post("/api/show", { name: "qwen2.5-coder:1.5b" })).json()) as { template: string; capabilities: string[] };
    expect(coder.template.includes(".Suffix")).toBe(true);
    expect(coder.capabilities).toEqual(expect.arrayContaining(["completion", "tools", "insert"]));
  });

  it("_streamChat: options with num_ctx 8192 and undefined fields, keep_alive 1800, tools on the last user turn", async () => {
    const options = { temperature: 0, top_p: undefined, top_k: undefined, num_predict: 4, stop: ["<|eot_id|>"], num_ctx: 8192, mirostat: undefined, num_thread: undefined, use_mmap: undefined, min_p: undefined, num_gpu: undefined };
    const chat = await post("/api/chat", { model: "llama3.2", messages: [{ role: "user", content: "hi" }], options, think: undefined, keep_alive: 1800, stream: true });
    expect((await lines(chat)).at(-1)).toMatchObject({ done: true });
    const tools = [{ type: "function", function: { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];
    const withTools = await post("/api/chat", { model: "qwen2.5-coder:1.5b", messages: [{ role: "user", content: "read a.txt" }], options, keep_alive: 1800, stream: true, tools });
    expect(withTools.status, await withTools.clone().text()).toBe(200);
    const last = (await lines(withTools)).at(-1)!;
    expect(last.done, JSON.stringify(last)).toBe(true);
    // a model whose template has no tools is refused as Ollama refuses it
    const refused = await post("/api/chat", { model: "llama3.2", messages: [{ role: "user", content: "read a.txt" }], stream: true, tools });
    expect(refused.status).toBe(400);
  });

  it("_streamFim: generate with a suffix and raw, streamed; _embed: embed with input chunks", async () => {
    const fim = await post("/api/generate", { model: "qwen2.5-coder:1.5b", prompt: "def add(a, b):\n    ", suffix: "\n\nprint(add(1, 2))", raw: true, options: { temperature: 0, num_predict: 4 }, keep_alive: 1800, stream: true });
    const out = await lines(fim);
    expect(out.at(-1), JSON.stringify(out.at(-1))).toMatchObject({ done: true });
    // a model without fill-in-the-middle: refused as Ollama refuses it, before anything is loaded
    const noFim = await post("/api/generate", { model: "llama3.2", prompt: "a", suffix: "b", stream: true });
    expect(noFim.status).toBe(400);
    expect(((await noFim.json()) as { error: string }).error).toBe('"llama3.2:latest" does not support insert');
    const raw = await post("/api/generate", { model: "llama3.2", prompt: "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", raw: true, options: { num_predict: 3 }, keep_alive: 1800, stream: true });
    expect((await lines(raw)).at(-1)).toMatchObject({ done: true });
    const e = (await (await post("/api/embed", { model: "embeddinggemma", input: ["chunk one", "chunk two"] })).json()) as { embeddings: number[][] };
    expect(e.embeddings).toHaveLength(2);
  });
});

describe("VS Code Copilot Chat (src/extension/byok/vscode-node/ollamaProvider.ts)", () => {
  it("version at least 0.6.4, tags, show with model_info and capabilities, then /v1/chat/completions by the listed name", async () => {
    const { version } = (await (await fetch(`${server.url}/api/version`)).json()) as { version: string };
    const [a, b, c] = version.split(".").map((n) => parseInt(n, 10)) as [number, number, number];
    expect(a > 0 || b > 6 || (b === 6 && c >= 4)).toBe(true);
    const { models } = (await (await fetch(`${server.url}/api/tags`)).json()) as { models: Array<{ model: string }> };
    for (const m of models) {
      const info = (await (await post("/api/show", { model: m.model }, { "User-Agent": "GitHubCopilotChat/0.30.0" })).json()) as { capabilities: string[]; model_info: Record<string, unknown> };
      const arch = info.model_info["general.architecture"] as string;
      expect(typeof info.model_info[`${arch}.context_length`]).toBe("number");
      // Ollama echoes the requested name as general.basename to Copilot
      expect(info.model_info["general.basename"]).toBe(m.model);
      expect(info.capabilities).toBeInstanceOf(Array);
    }
    const vision = (await (await post("/api/show", { model: "gemma3:4b" })).json()) as { capabilities: string[] };
    expect(vision.capabilities.includes("vision")).toBe(true);
    const r = await post("/v1/chat/completions", { model: "gemma3:4b", messages: [{ role: "system", content: "sys" }, { role: "user", content: "hi" }], stream: true, max_tokens: 3, temperature: 0 });
    const sse = await r.text();
    expect(r.status, sse).toBe(200);
    expect(sse).toMatch(/"finish_reason":"(stop|length)"/);
  });
});
