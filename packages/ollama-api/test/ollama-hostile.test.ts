import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readdir, readFile } from "node:fs/promises";
import { request } from "node:http";
import { connect, type Socket } from "node:net";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { BridgeError, listeningPort } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile } from "./ollama-helpers";

/**
 * The attacks of issue #35 that reach the API and the router behind it, each as a hostile
 * client or web page would make it. One server for the file: a tiny model, and body limits
 * small enough that the memory attack costs megabytes, not gigabytes.
 */
const temp = tempDirs();
let server: OllamaServer;
let store: ModelStore;
const MiB = 2 ** 20;
const PER_BODY = 8 * MiB;
const ALL_BODIES = 32 * MiB;

beforeAll(async () => {
  const root = await temp();
  await buildOllamaStore(root, [{ name: "tiny", model: await llamaFile(await temp()), params: { num_ctx: 256 } }]);
  store = new ModelStore(root);
  server = await serveOllama({
    models: "all",
    store,
    cache: { dir: await temp() },
    llamaServer: await llamaServerPath(),
    args: SMALL_SERVER_ARGS,
    port: 0,
    maxBodyBytes: PER_BODY,
    maxHeldBodyBytes: ALL_BODIES,
  });
});
afterAll(async () => {
  await server?.stop();
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A raw request: path, Host and Origin exactly as an attacker sends them (no URL normalisation on the way). */
function raw(base: string, path: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const u = new URL(base);
    const req = request({ host: u.hostname, port: u.port, path, method: opts.method ?? "GET", headers: opts.headers ?? {} }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

const post = (path: string, body: unknown) => raw(server.url, path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

/** The router's model instances: its child processes, and the ports they listen on. */
async function instancePorts(): Promise<number[]> {
  const ports: number[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
    // pid (comm) state ppid …: comm may hold spaces, so read after its closing parenthesis
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid !== server.router.pid) continue;
    const port = await listeningPort(Number(pid));
    if (port !== undefined) ports.push(port);
  }
  return ports;
}

/** What a page on another origin could read: the status, and whether CORS would let it see the answer. */
function expectClosedToPages(a: Answer, what: string): void {
  expect(a.status, `${what}: ${a.body}`).toBe(401);
  expect(a.body, what).not.toMatch(/tiny|"data"/);
  const allow = a.headers["access-control-allow-origin"];
  expect(allow === "*" || allow === "https://evil.com", `${what}: Access-Control-Allow-Origin ${String(allow)}`).toBe(false);
}

describe("the router's loopback port: closed to web pages and to anyone without the bridge's key", () => {
  const evil = { origin: "https://evil.com" };

  it("a request from a foreign Origin without the key reads nothing: not the models, not the admin routes", async () => {
    expectClosedToPages(await raw(server.router.url, "/v1/models", { headers: evil }), "GET /v1/models");
    expectClosedToPages(await raw(server.router.url, "/models", { headers: evil }), "GET /models");
    const load = await raw(server.router.url, "/models/load", { method: "POST", headers: { ...evil, "content-type": "text/plain" }, body: JSON.stringify({ model: "tiny" }) });
    expectClosedToPages(load, "POST /models/load");
    const chat = await raw(server.router.url, "/v1/chat/completions", { method: "POST", headers: { ...evil, "content-type": "text/plain" }, body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }] }) });
    expectClosedToPages(chat, "POST /v1/chat/completions");
    // a preflight answers, but allows no foreign origin
    const pre = await raw(server.router.url, "/v1/models", { method: "OPTIONS", headers: { ...evil, "access-control-request-method": "GET" } });
    expect([undefined, "https://evil.com", "*"].includes(pre.headers["access-control-allow-origin"] as string | undefined) && pre.headers["access-control-allow-origin"] !== undefined).toBe(false);
  });

  it("the API keeps working through the bridge, and the model instance the router started is keyed too", async () => {
    const r = await post("/api/chat", { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: false, options: { num_predict: 2 } });
    expect(r.status, r.body).toBe(200);
    expect(JSON.parse(r.body).message.role).toBe("assistant");
    const ports = await instancePorts();
    expect(ports.length, "the router runs the model in an instance of its own").toBeGreaterThan(0);
    for (const port of ports) {
      const base = `http://127.0.0.1:${port}`;
      expectClosedToPages(await raw(base, "/v1/models", { headers: evil }), `instance :${port} GET /v1/models`);
      const chat = await raw(base, "/v1/chat/completions", { method: "POST", headers: { ...evil, "content-type": "text/plain" }, body: JSON.stringify({ messages: [{ role: "user", content: "hi" }] }) });
      expectClosedToPages(chat, `instance :${port} POST /v1/chat/completions`);
    }
  });

  it("pass-through arguments cannot move or unlock the router (it is the API's alone)", async () => {
    for (const args of [["--api-key", "x"], ["--host", "0.0.0.0"], ["--cors-origins", "*"]]) {
      const e = await serveOllama({ models: "all", store, port: 0, llamaServer: await llamaServerPath(), args }).catch((x: unknown) => x);
      expect(e, args.join(" ")).toBeInstanceOf(BridgeError);
      expect((e as BridgeError).code).toBe("BAD_ARGUMENT");
      expect((e as BridgeError).message).toContain(args[0]);
    }
  });
});

describe("/v1 paths: only the routes the API serves reach the router", () => {
  const tricks = [
    "/v1/%2e%2e/models/load",
    "/v1/%2E%2E/models/load",
    "/v1/..%2fmodels%2fload",
    "/v1/%2e%2e%2fmodels%2fload",
    "/v1/chat/completions/../../models/load",
    "/v1/chat/../../models/load",
    "/v1//../models/load",
    "/v1/..\\models\\load",
    "/v1\\..\\models/load",
    "/v1/%5c..%5cmodels/load",
    "/v1/./../models/unload",
    "/v1/models/../../models/load",
    "/v1/props",
    "/v1/slots",
    "/v1/health",
  ];
  it.each(tricks)("POST %s is 404 and loads nothing", async (path) => {
    const r = await post(path, { model: "tiny" });
    expect(r.status, r.body).toBe(404);
    expect(r.body).not.toMatch(/success/);
  });

  it("encoded and doubled forms of a served route are not served either; the route itself is", async () => {
    for (const path of ["/v1//chat/completions", "/v1/chat//completions", "/v1/chat%2fcompletions", "/v1/chat\\completions", "/v1/./chat/completions"]) {
      expect((await post(path, { model: "tiny", messages: [{ role: "user", content: "hi" }] })).status, path).toBe(404);
    }
    const ok = await post("/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    expect(ok.status, ok.body).toBe(200);
    expect((await raw(server.url, "/v1/chat/completions")).status).toBe(405);
  });
});

describe("malformed text: 400, not 500", () => {
  it("a lone UTF-16 surrogate in a message", async () => {
    const body = '{"model":"tiny","stream":false,"messages":[{"role":"user","content":"a\\ud800b"}]}';
    for (const path of ["/api/chat", "/v1/chat/completions"]) {
      const r = await raw(server.url, path, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(r.status, `${path}: ${r.body}`).toBe(400);
      expect(r.body).toMatch(/surrogate|UTF/i);
    }
    const gen = await raw(server.url, "/api/generate", { method: "POST", headers: { "content-type": "application/json" }, body: '{"model":"tiny","stream":false,"prompt":"\\udfff"}' });
    expect(gen.status, gen.body).toBe(400);
  });

  it("a malformed % escape in /api/blobs/… and /v1/models/…", async () => {
    expect((await raw(server.url, "/api/blobs/sha256%zz", { method: "HEAD" })).status).toBe(400);
    expect((await raw(server.url, "/api/blobs/sha256-%E0%A4%A", { method: "HEAD" })).status).toBe(400);
    const m = await raw(server.url, "/v1/models/tiny%");
    expect(m.status, m.body).toBe(400);
    expect(JSON.parse(m.body).error.message).toMatch(/escape/);
    expect((await raw(server.url, "/v1/models/%E0%A4%A")).status).toBe(400);
  });
});

/** Polls `done` every 50 ms for up to `ms` (a bound for a loaded machine, not a timing assertion). */
async function until(done: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("request bodies: one bound on the memory all connections hold", () => {
  it("12 connections with unfinished large bodies: the server holds at most its limit, refuses the rest with 503, and still answers", async () => {
    const port = Number(new URL(server.url).port);
    const SENT = 7 * MiB;
    const chunk = Buffer.alloc(MiB, 0x20);
    const rss0 = process.memoryUsage().rss;
    let peakRss = rss0;
    let peakHeld = 0;
    const sample = setInterval(() => {
      peakRss = Math.max(peakRss, process.memoryUsage().rss);
      peakHeld = Math.max(peakHeld, server.heldBodyBytes());
    }, 20);
    const clients = Array.from({ length: 12 }, () => {
      const c = { socket: connect(port, "127.0.0.1") as Socket, answer: "", closed: false };
      c.socket.setEncoding("latin1");
      c.socket.on("data", (d: string) => (c.answer += d));
      c.socket.on("error", () => undefined); // the server cuts refused connections
      c.socket.on("close", () => (c.closed = true));
      // a body just under the per-body limit, of which 7 MiB come and the rest never does
      c.socket.write(`POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${PER_BODY - 1}\r\n\r\n`);
      for (let i = 0; i < SENT / MiB; i++) c.socket.write(chunk);
      return c;
    });
    try {
      const refused = () => clients.filter((c) => c.closed || c.answer.startsWith("HTTP/1.1 503")).length;
      // every connection either has its 7 MiB held by the server or was refused
      await until(() => refused() + server.heldBodyBytes() / SENT === clients.length, 120_000, `refused ${refused()}, held ${server.heldBodyBytes()}`);
      const held = server.heldBodyBytes();
      expect(held).toBeLessThanOrEqual(ALL_BODIES);
      expect(refused()).toBeGreaterThanOrEqual(clients.length - Math.floor(ALL_BODIES / SENT));
      const answered = clients.find((c) => c.answer.startsWith("HTTP/1.1 503"));
      expect(answered?.answer, "a refusal says why").toMatch(/server busy/);
      expect(answered?.answer).toMatch(/connection: close/i);
      // the server still answers a small request while it holds the bodies it accepted
      const small = await raw(server.url, "/api/version");
      expect(small.status).toBe(200);
      console.log(`slow-body attack: ${clients.length} x ${SENT / MiB} MiB sent, ${refused()} refused (503), server held ${held / MiB} MiB (peak ${peakHeld / MiB} MiB, limit ${ALL_BODIES / MiB} MiB); test process RSS ${Math.round(rss0 / MiB)} -> peak ${Math.round(peakRss / MiB)} MiB`);
    } finally {
      clearInterval(sample);
      for (const c of clients) c.socket.destroy();
    }
    expect(peakHeld).toBeLessThanOrEqual(ALL_BODIES);
    // bodies whose clients went away are let go
    await until(() => server.heldBodyBytes() === 0, 60_000, `held ${server.heldBodyBytes()} after the clients left`);
  });

  it("a body over the per-body limit gets 413, and the server stops reading it", async () => {
    const u = new URL(server.url);
    for (const declared of [true, false]) {
      let written = 0;
      const outcome = await new Promise<{ status?: number; closed: boolean }>((resolve) => {
        const req = request({ host: u.hostname, port: u.port, path: "/api/chat", method: "POST", headers: declared ? { "content-length": String(64 * PER_BODY) } : {} });
        let status: number | undefined;
        req.on("response", (res) => {
          status = res.statusCode;
          res.resume();
          res.on("end", () => resolve({ status, closed: false }));
        });
        req.on("error", () => resolve({ status, closed: true }));
        req.on("close", () => resolve({ status, closed: true }));
        // writes until the server answers or cuts the connection (or 64 times the limit is sent)
        const chunk = Buffer.alloc(MiB, 0x20);
        const pump = () => {
          while (status === undefined && !req.destroyed && written < 64 * PER_BODY) {
            written += chunk.length;
            if (!req.write(chunk)) return void req.once("drain", pump);
          }
        };
        pump();
      });
      expect(outcome.status, declared ? "declared length" : "chunked").toBe(413);
      expect(written, "the server stopped reading long before the client stopped writing").toBeLessThan(16 * PER_BODY);
    }
    await until(() => server.heldBodyBytes() === 0, 60_000, "the refused bodies let go");
  });
});
