import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { request } from "node:http";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { BridgeError } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile } from "./ollama-helpers";

const temp = tempDirs();
let server: OllamaServer;
let store: ModelStore;

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
    apiKey: "sesame",
    env: { ...process.env, OLLAMA_ORIGINS: "https://chat.example.org,chrome-extension://*" },
  });
});
afterAll(async () => {
  await server?.stop();
});

/** A raw request, so that Host and Origin are exactly what a browser or an attacker's page would send. */
function raw(path: string, headers: Record<string, string>, method = "GET"): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${server.url}${path}`, { method, headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("serveOllama: who may call it (as `serve` and Ollama allow)", () => {
  it("with an API key: every route but GET / needs it, the OpenAI routes too", async () => {
    expect((await raw("/", {})).status).toBe(200);
    const denied = await raw("/api/tags", {});
    expect(denied.status).toBe(401);
    expect(JSON.parse(denied.body).error).toMatch(/API key/);
    expect((await raw("/api/tags", { authorization: "Bearer wrong" })).status).toBe(401);
    expect((await raw("/api/tags", { authorization: "Bearer sesame" })).status).toBe(200);
    expect((await raw("/v1/models", {})).status).toBe(401);
    expect((await raw("/v1/models", { authorization: "Bearer sesame" })).status).toBe(200);
  });

  it("CORS as Ollama's: local and listed origins are echoed, preflights answered, any other origin refused", async () => {
    const key = { authorization: "Bearer sesame" };
    for (const origin of ["http://localhost:3000", "https://chat.example.org", "chrome-extension://abcdef", "vscode-webview://x"]) {
      const r = await raw("/api/version", { ...key, origin });
      expect(r.status, origin).toBe(200);
      expect(r.headers["access-control-allow-origin"]).toBe(origin);
    }
    const pre = await raw("/api/chat", { origin: "http://127.0.0.1:8080", "access-control-request-method": "POST" }, "OPTIONS");
    expect(pre.status).toBe(204);
    expect(pre.headers["access-control-allow-headers"]).toMatch(/Authorization/);
    expect((await raw("/api/version", { ...key, origin: "https://evil.example.com" })).status).toBe(403);
  });

  it("on loopback, a Host of another name is refused (DNS rebinding), as Ollama does", async () => {
    expect((await raw("/api/version", { authorization: "Bearer sesame", host: "evil.example.com" })).status).toBe(403);
    expect((await raw("/api/version", { authorization: "Bearer sesame", host: "localhost:11434" })).status).toBe(200);
  });

  it("beyond loopback only with an API key or insecure; a taken port is named", async () => {
    const e = await serveOllama({ models: "all", store, host: "0.0.0.0", port: 0, llamaServer: await llamaServerPath() }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BridgeError);
    expect((e as BridgeError).code).toBe("INSECURE_BIND");
    const taken = await serveOllama({ models: "all", store, port: server.port, llamaServer: await llamaServerPath() }).catch((x: unknown) => x);
    expect((taken as BridgeError).code).toBe("PORT_IN_USE");
  });
});
