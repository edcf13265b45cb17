import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { archKey, writeGguf } from "@compat/gguf";
import { generateFixture, SMALL_SERVER_ARGS } from "@compat/testkit";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { llamaServerPath, tempDirs } from "./helpers";
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
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0, onStatus: (l) => lines.push(l) });
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

/**
 * The sequences that hung the scheduler before it was a state machine (issue #39), on real
 * llama-server: every request ends, answered or clearly refused, within a generous bound; no
 * assertion depends on how fast the machine is.
 */
describe("the scheduler on sequences that once hung it", () => {
  /** A server over `n` models (`s1:latest` …) with `modelsMax` places. */
  async function serverOf(n: number, modelsMax: number, extra: Parameters<typeof buildOllamaStore>[1] = []): Promise<{ server: OllamaServer; status: string[] }> {
    const root = await temp();
    const dir = await temp();
    const files = await Promise.all(Array.from({ length: n }, (_, i) => llamaFile(dir, 10 + i)));
    await buildOllamaStore(root, [...files.map((model, i) => ({ name: `s${i + 1}`, model, params: { num_ctx: 256 } })), ...extra]);
    const status: string[] = [];
    const server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0, modelsMax, onStatus: (l) => status.push(l) });
    return { server, status };
  }

  /** One short chat; its HTTP status and body (aborted: status 0). Waits at most 240 s. */
  async function chat(server: OllamaServer, model: string, signal?: AbortSignal): Promise<{ model: string; status: number; body: string }> {
    const body = JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], stream: false, options: { temperature: 0, num_predict: 3 } });
    try {
      const r = await fetch(`${server.url}/api/chat`, { method: "POST", body, signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(240_000)]) : AbortSignal.timeout(240_000) });
      return { model, status: r.status, body: (await r.text()).slice(0, 300) };
    } catch (e) {
      if (signal?.aborted) return { model, status: 0, body: "aborted" };
      throw e;
    }
  }

  const ps = async (server: OllamaServer) => ((await (await fetch(`${server.url}/api/ps`)).json()) as { models: Array<{ name: string; expires_at: string }> }).models;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("A, B, A 50 ms apart with one place: all three answered, and B again after", { timeout: 600_000 }, async () => {
    const { server } = await serverOf(2, 1);
    try {
      const answers: Array<Promise<{ model: string; status: number; body: string }>> = [];
      for (const m of ["s1", "s2", "s1"]) {
        answers.push(chat(server, m));
        await sleep(50);
      }
      const done = await Promise.all(answers);
      expect(done.map((a) => a.status), JSON.stringify(done)).toEqual([200, 200, 200]);
      expect((await chat(server, "s2")).status).toBe(200);
      expect((await ps(server)).length).toBeLessThanOrEqual(1);
    } finally {
      await server.stop();
    }
  });

  it("16 concurrent chats over 8 models with 4 places: all answered, never more than 4 loaded", { timeout: 900_000 }, async () => {
    const { server, status } = await serverOf(8, 4);
    try {
      let most = 0;
      let watching = true;
      const watch = (async () => {
        while (watching) {
          most = Math.max(most, (await ps(server)).length);
          await sleep(100);
        }
      })();
      const done = await Promise.all(Array.from({ length: 16 }, (_, i) => chat(server, `s${(i % 8) + 1}`)));
      watching = false;
      await watch;
      expect(done.map((a) => a.status), JSON.stringify(done)).toEqual(done.map(() => 200));
      expect(most).toBeLessThanOrEqual(4);
      expect(status.some((l) => /to make room for/.test(l))).toBe(true);
      // and every model still answers afterwards
      for (let i = 1; i <= 8; i++) expect((await chat(server, `s${i}`)).status).toBe(200);
    } finally {
      await server.stop();
    }
  });

  it("12 concurrent chats over 6 models with 2 places, half cancelled by their clients midway: the others all answered", { timeout: 900_000 }, async () => {
    const { server } = await serverOf(6, 2);
    try {
      const done = await Promise.all(
        Array.from({ length: 12 }, (_, i) => {
          if (i % 2 === 0) return chat(server, `s${(i % 6) + 1}`);
          const abort = new AbortController();
          setTimeout(() => abort.abort(), 20 * i);
          return chat(server, `s${(i % 6) + 1}`, abort.signal);
        }),
      );
      const kept = done.filter((_, i) => i % 2 === 0);
      expect(kept.map((a) => a.status), JSON.stringify(done)).toEqual(kept.map(() => 200));
      // nothing is left waiting: every model answers at once
      for (let i = 1; i <= 6; i++) expect((await chat(server, `s${i}`)).status).toBe(200);
    } finally {
      await server.stop();
    }
  });

  it("a model llama-server cannot load: its own error line, and the working model stays loaded", { timeout: 600_000 }, async () => {
    const dir = await temp();
    // one block more than the file has: llama-server refuses it (a tensor not found), our reader does not
    const broken = generateFixture("llama", { seed: 30, layout: "native" }).text;
    broken.setU32(archKey("llama", "block_count"), broken.getNumber(archKey("llama", "block_count")) + 1);
    const path = join(dir, "broken.gguf");
    await writeGguf(broken, path);
    const { server } = await serverOf(1, 1, [{ name: "broken", model: path, params: { num_ctx: 256 } }]);
    try {
      expect((await chat(server, "s1")).status).toBe(200);
      const r = await chat(server, "broken");
      expect(r.status).toBe(500);
      expect(JSON.parse(r.body).error).toMatch(/^llama-server could not load broken:latest: llama_model_load: error loading model: .*'blk.2.attn_norm.weight' not found$/);
      // the first try had to make room; from then on the working model is never unloaded for it
      expect((await chat(server, "s1")).status).toBe(200);
      const again = await chat(server, "broken");
      expect(JSON.parse(again.body).error).toBe(JSON.parse(r.body).error);
      expect((await ps(server)).map((m) => m.name)).toEqual(["s1:latest"]);
    } finally {
      await server.stop();
    }
  });

  it('keep_alive "9999999999h", 1e13 and 1e300 mean for ever, and /api/ps keeps answering', { timeout: 300_000 }, async () => {
    for (const keep_alive of ["9999999999h", 1e13, 1e300]) {
      const r = await fetch(`${server.url}/api/generate`, { method: "POST", body: JSON.stringify({ model: "m1", prompt: "hi", stream: false, keep_alive, options: { num_predict: 1 } }) });
      expect(r.status).toBe(200);
      const listed = await fetch(`${server.url}/api/ps`);
      expect(listed.status).toBe(200);
      const m1 = ((await listed.json()) as { models: Array<{ name: string; expires_at: string }> }).models.find((m) => m.name === "m1:latest")!;
      // Ollama's "for ever": Go's largest duration from now, about 292 years
      expect(new Date(m1.expires_at).getTime()).toBeGreaterThan(Date.now() + 250 * 365 * 86_400_000);
    }
  });
});
