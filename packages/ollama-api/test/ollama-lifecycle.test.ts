import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ollama } from "ollama";
import type { OllamaServer } from "@compat/ollama-api";
import { tempDirs } from "./helpers";
import { PRINTABLE, serveTwoLlamas } from "./ollama-helpers";

/**
 * A model's life in the router behind the Ollama API: the context a request asks for
 * (options.num_ctx and the other load-time options), how long an idle model stays loaded
 * (keep_alive), and what a client that goes away mid-answer leaves behind.
 */
const temp = tempDirs();
let server: OllamaServer;
let ollama: Ollama;
const logs: string[] = [];
const status: string[] = [];

beforeAll(async () => {
  server = await serveTwoLlamas(temp, ["small", "other"], { onLog: (l) => logs.push(l), onStatus: (l) => status.push(l) });
  ollama = new Ollama({ host: server.url });
});
afterAll(async () => {
  await server?.stop();
});

/** About 550 tokens: more than the params layer's context of 256. */
const LONG = Array.from({ length: 150 }, (_, i) => `word${i}`).join(" ");

async function ps(): Promise<Array<{ name: string; context_length: number; expires_at: string }>> {
  return ((await (await fetch(`${server.url}/api/ps`)).json()) as { models: Array<{ name: string; context_length: number; expires_at: string }> }).models;
}

/** The router's model instances and their status, by router name. */
/** A request to the router itself, which answers only with the key the API made for it. */
function routerFetch(url: string): Promise<Response> {
  return fetch(url, { headers: { authorization: `Bearer ${server.routerKey}` } });
}

async function routerModels(): Promise<Map<string, string>> {
  const body = (await (await routerFetch(`${server.router.url}/models`)).json()) as { data: Array<{ aliases?: string[]; id: string; status: { value: string } }> };
  return new Map(body.data.map((m) => [m.aliases?.[0] ?? m.id, m.status.value]));
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("load-time options: a request's num_ctx is the context it runs with", () => {
  it("a prompt longer than the params layer's context fails at 256 and is answered with num_ctx 1024", { timeout: 180_000 }, async () => {
    const refused = await fetch(`${server.url}/api/chat`, { method: "POST", body: JSON.stringify({ model: "small", messages: [{ role: "user", content: LONG }], stream: false, options: { num_predict: 2 } }) });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: string }).error).toMatch(/context size \(256 tokens\)/);
    expect((await ps()).find((m) => m.name === "small:latest")?.context_length).toBe(256);

    const r = await ollama.chat({ model: "small", messages: [{ role: "user", content: LONG }], options: { num_ctx: 1024, num_predict: 2, temperature: 0 } });
    expect(r.done).toBe(true);
    expect(r.prompt_eval_count).toBeGreaterThan(256);
    expect(r.load_duration).toBeGreaterThan(0); // the model was loaded again, with the larger context
    expect((await ps()).find((m) => m.name === "small:latest")?.context_length).toBe(1024);
    // one configuration of a model at a time: the params layer's was unloaded for it
    const router = await routerModels();
    expect(router.get("small:latest~ctx1024")).toBe("loaded");
    expect(router.get("small:latest")).toBe("unloaded");
  });

  it("requests that name no load-time option share the loaded configuration; a different num_ctx reloads", { timeout: 180_000 }, async () => {
    await ollama.chat({ model: "small", messages: [{ role: "user", content: "hi" }], options: { num_ctx: 1024, num_predict: 1 } });
    // no num_ctx: served by the 1024 runner as it is (no reload), long prompt included
    const shared = await ollama.generate({ model: "small", prompt: LONG, options: { num_predict: 2 } });
    expect(shared.prompt_eval_count).toBeGreaterThan(256);
    expect(shared.load_duration ?? 0).toBe(0);
    // the OpenAI routes share it too
    const v1 = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "small", messages: [{ role: "user", content: "hi" }], max_tokens: 2, grammar: PRINTABLE }) });
    expect(v1.status, await v1.clone().text()).toBe(200);
    expect((await ps()).find((m) => m.name === "small:latest")?.context_length).toBe(1024);

    // an explicit num_ctx of the params layer's value asks for that configuration
    const back = await ollama.chat({ model: "small", messages: [{ role: "user", content: "hi" }], options: { num_ctx: 256, num_predict: 1 } });
    expect(back.load_duration).toBeGreaterThan(0);
    expect((await ps()).find((m) => m.name === "small:latest")?.context_length).toBe(256);
    expect((await routerModels()).get("small:latest~ctx1024")).toBe("unloaded");
  });

  it("the other load-time options (num_batch, num_thread, use_mmap) pick a configuration of their own, with their flags", { timeout: 180_000 }, async () => {
    const r = await ollama.chat({ model: "small", messages: [{ role: "user", content: "hi" }], options: { num_batch: 64, num_thread: 1, use_mmap: false, num_predict: 1 } });
    expect(r.done).toBe(true);
    const body = (await (await routerFetch(`${server.router.url}/models`)).json()) as { data: Array<{ aliases?: string[]; status: { value: string; args?: string[] } }> };
    const variant = body.data.find((m) => m.aliases?.[0] === "small:latest~batch64-mmap0-threads1")!;
    expect(variant.status.value).toBe("loaded");
    const args = variant.status.args!;
    expect(args[args.indexOf("--batch-size") + 1]).toBe("64");
    expect(args).toContain("--no-mmap");
    // an option of the wrong type is refused, as Ollama refuses it
    const bad = await fetch(`${server.url}/api/chat`, { method: "POST", body: JSON.stringify({ model: "small", messages: [{ role: "user", content: "hi" }], options: { num_ctx: "big" } }) });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toBe('option "num_ctx" must be of type integer');
  });

  it("8 concurrent requests mixing contexts over two models are all answered, each with the context it asked for", { timeout: 300_000 }, async () => {
    const mix: Array<[string, number | undefined]> = [
      ["small", 512],
      ["other", undefined],
      ["small", undefined],
      ["other", 1024],
      ["small", 1024],
      ["other", undefined],
      ["small", 512],
      ["other", 512],
    ];
    const answers = await Promise.all(
      mix.map(async ([model, numCtx]) => {
        const r = await fetch(`${server.url}/api/generate`, {
          method: "POST",
          body: JSON.stringify({ model, prompt: numCtx && numCtx >= 1024 ? LONG : "hi", stream: false, options: { num_predict: 2, ...(numCtx ? { num_ctx: numCtx } : {}) } }),
          signal: AbortSignal.timeout(240_000),
        });
        return { model, numCtx, status: r.status, body: (await r.json()) as { error?: string; prompt_eval_count?: number } };
      }),
    );
    // on a failure, what llama-server said about it
      expect(answers.map((a) => a.status), `${JSON.stringify(answers)}\n${server.router.lastLines(60).join("\n")}`).toEqual(mix.map(() => 200));
    for (const a of answers) if (a.numCtx === 1024) expect(a.body.prompt_eval_count).toBeGreaterThan(256);
  });
});

describe("keep_alive: how long an idle model stays loaded", () => {
  // 5 s, not 1: the /api/ps that follows the answer must come before the expiry, on a loaded machine too
  it('"5s": listed by /api/ps with that expiry, then unloaded once idle that long', { timeout: 120_000 }, async () => {
    const before = Date.now();
    await ollama.generate({ model: "other", prompt: "hi", keep_alive: "5s", options: { num_predict: 1 } });
    const listed = (await ps()).find((m) => m.name === "other:latest");
    expect(listed).toBeDefined();
    const expires = new Date(listed!.expires_at).getTime();
    expect(expires).toBeGreaterThanOrEqual(before + 5000 - 50);
    expect(expires).toBeLessThan(Date.now() + 5000 + 50);
    await until("other:latest to be unloaded", async () => ((await ps()).some((m) => m.name === "other:latest") ? undefined : true));
    expect(status.some((l) => /unloading other:latest \(idle for its keep_alive\)/.test(l))).toBe(true);
  });

  it("0: answered, then unloaded at once; -1: kept (expiry years away), and a later request without keep_alive keeps it so", { timeout: 120_000 }, async () => {
    const r = await ollama.generate({ model: "other", prompt: "hi", keep_alive: 0, options: { num_predict: 1 } });
    expect(r.done).toBe(true);
    // "at once" against the 5 minutes kept by default: the bound is until's own, because the stop
    // itself can take llama-server's router up to its 10 s grace before it kills an instance
    await until("other:latest to be unloaded", async () => ((await ps()).some((m) => m.name === "other:latest") ? undefined : true));

    await ollama.generate({ model: "other", prompt: "hi", keep_alive: -1, options: { num_predict: 1 } });
    await ollama.generate({ model: "other", prompt: "hi", options: { num_predict: 1 } });
    const kept = (await ps()).find((m) => m.name === "other:latest")!;
    expect(new Date(kept.expires_at).getTime()).toBeGreaterThan(Date.now() + 100 * 365 * 86_400_000);
    // a load after an unload starts again from the server's keep-alive (5 minutes by default)
    await ollama.generate({ model: "other", prompt: "", keep_alive: 0 });
    await ollama.generate({ model: "other", prompt: "hi", options: { num_predict: 1 } });
    const fresh = new Date((await ps()).find((m) => m.name === "other:latest")!.expires_at).getTime();
    expect(fresh).toBeGreaterThan(Date.now() + 4 * 60_000);
    expect(fresh).toBeLessThan(Date.now() + 6 * 60_000);
  });

  it("a bad keep_alive is a 400 naming it", async () => {
    const r = await fetch(`${server.url}/api/generate`, { method: "POST", body: JSON.stringify({ model: "other", prompt: "hi", keep_alive: "soon" }) });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: string }).error).toMatch(/invalid duration "soon"/);
  });
});

describe("a client that goes away mid-answer", () => {
  for (const path of ["/api/chat", "/api/generate"] as const) {
    it(`${path}: llama-server cancels the generation, the lease is let go, and the next request is answered`, { timeout: 180_000 }, async () => {
      await ollama.generate({ model: "small", prompt: "hi", options: { num_predict: 1 } });
      const cancelsBefore = logs.filter((l) => /cancel task/.test(l)).length;
      // keep_alive 10 s: the instance must outlive llama-server's word that it cancelled, which a
      // loaded machine can log later than 2 s after the abort (the unload would kill it first)
      const ask = { model: "small", stream: true, keep_alive: "10s", options: { num_predict: 100_000, temperature: 1, num_ctx: 4096 } };
      const body = path === "/api/chat" ? { ...ask, messages: [{ role: "user", content: "tell me everything" }] } : { ...ask, prompt: "tell me everything" };
      const abort = new AbortController();
      const r = await fetch(`${server.url}${path}`, { method: "POST", body: JSON.stringify(body), signal: abort.signal });
      const reader = r.body!.getReader();
      let text = "";
      // a few pieces, so that llama-server is generating
      while (text.split("\n").length < 4) text += new TextDecoder().decode((await reader.read()).value);
      expect(JSON.parse(text.split("\n")[0]!).done).toBe(false);
      abort.abort();
      // llama-server's own word that it stopped the task, and its slot idle
      // (seen once in three full runs on a loaded machine, never alone: the log says what llama-server did instead)
      await until("llama-server to cancel the task", async () => (logs.filter((l) => /cancel task/.test(l)).length > cancelsBefore ? true : undefined)).catch((e: Error) => {
        throw new Error(`${e.message}; llama-server's last lines:\n${logs.slice(-20).join("\n")}`);
      });
      await until("the slot to be idle", async () => {
        const r = await routerFetch(`${server.router.url}/slots?autoload=false&model=${encodeURIComponent("small:latest~ctx4096")}`);
        // on a slow machine its keep_alive may already have run out: an instance gone is idle too
        if (r.status !== 200) return (await ps()).some((m) => m.name === "small:latest") ? undefined : true;
        const slots = (await r.json()) as Array<{ is_processing: boolean }>;
        return slots.every((s) => !s.is_processing) ? true : undefined;
      });
      // the aborted request gave its lease back: its keep_alive runs out and the model is unloaded
      await until("small:latest to be unloaded", async () => ((await ps()).some((m) => m.name === "small:latest") ? undefined : true));
      const next = await ollama.chat({ model: "small", messages: [{ role: "user", content: "hi" }], options: { num_predict: 2 } });
      expect(next.done).toBe(true);
    });
  }
});
