import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { llamaServerPath, SMALL, tempDirs } from "./helpers";
import { llamaFile, PRINTABLE } from "./ollama-helpers";

const temp = tempDirs();
const NAMES = ["m1", "m2", "m3", "m4", "m5", "m6"].map((n) => `${n}:latest`);
let server: OllamaServer;
const lines: string[] = [];

beforeAll(async () => {
  const root = await temp();
  const dir = await temp();
  // six models, two more than the default limit of four loaded at once
  const files = await Promise.all([1, 2, 3, 4, 5, 6].map((seed) => llamaFile(dir, seed)));
  await buildOllamaStore(root, NAMES.map((name, i) => ({ name, model: files[i]!, params: { num_ctx: 256 } })));
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL, port: 0, onStatus: (l) => lines.push(l) });
});
afterAll(async () => {
  await server?.stop();
});

/** One short answer, by the Ollama API or the OpenAI one; the status and how long it took. */
async function ask(name: string, api: "ollama" | "openai"): Promise<{ name: string; status: number; ms: number; text?: string }> {
  const t = performance.now();
  const [path, body] =
    api === "ollama"
      ? ["/api/chat", { model: name, messages: [{ role: "user", content: "hi" }], stream: false, options: { temperature: 0, num_predict: 3 } }]
      : ["/v1/chat/completions", { model: name, messages: [{ role: "user", content: "hi" }], max_tokens: 3, temperature: 0, grammar: PRINTABLE }];
  const r = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(150_000) });
  const text = await r.text();
  return { name, status: r.status, ms: Math.round(performance.now() - t), ...(r.status !== 200 ? { text: text.slice(0, 300) } : {}) };
}

async function loaded(): Promise<string[]> {
  const r = (await (await fetch(`${server.url}/api/ps`)).json()) as { models: Array<{ name: string }> };
  return r.models.map((m) => m.name).sort();
}

describe("the scheduler in front of the router: more models than may be loaded at once", () => {
  it("8 concurrent requests over loaded and unloaded models are all answered, never more than 4 loaded", { timeout: 600_000 }, async () => {
    for (const n of NAMES.slice(0, 4)) expect((await ask(n, "ollama")).status).toBe(200);
    expect(await loaded()).toEqual(NAMES.slice(0, 4));
    // rounds of 8 at once, each mixing loaded and unloaded models, both APIs
    const rounds = [
      ["m1", "m5", "m2", "m6", "m3", "m5", "m4", "m6"],
      ["m6", "m5", "m4", "m3", "m2", "m1", "m6", "m1"],
      ["m2", "m2", "m5", "m5", "m1", "m6", "m3", "m4"],
    ];
    for (const [i, round] of rounds.entries()) {
      const answers = await Promise.all(round.map((n, j) => ask(`${n}:latest`, (i + j) % 2 === 0 ? "ollama" : "openai")));
      // on a failure, what llama-server said about it
      expect(answers.map((a) => a.status), `${JSON.stringify(answers)}\n${server.router.lastLines(60).join("\n")}`).toEqual(round.map(() => 200));
      expect((await loaded()).length).toBeLessThanOrEqual(4);
    }
    expect(lines.some((l) => /unloading m\d:latest to make room/.test(l))).toBe(true);
  });
});
