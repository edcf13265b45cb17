import { describe, expect, it } from "vitest";
import { chmod, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { join } from "node:path";
import { OLLAMA_API_VERSION, serveOllama } from "@compat/ollama-api";
import { BridgeError, checkPortFree, freePort } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { SMALL_SERVER_ARGS } from "@compat/testkit";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile } from "./ollama-helpers";

/**
 * The API while it starts: it listens before the router is up, as Ollama does, answers what
 * needs no router (`/`, /api/version) at once, holds every other request until the routes
 * exist, applies its access checks all along, and frees its port when the start fails.
 */
const temp = tempDirs();

/** A request with the Host header as given (fetch would not let a test set it). */
function raw(port: number, path: string, host = `127.0.0.1:${port}`): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, headers: { host } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** A llama-server that waits for `gate` to exist before it is the real one (the router's start, held). */
async function gatedServer(dir: string, gate: string): Promise<string> {
  const path = join(dir, "gated-llama-server");
  await writeFile(path, `#!/bin/sh\nwhile [ ! -e '${gate}' ]; do sleep 0.05; done\nexec '${await llamaServerPath()}' "$@"\n`);
  await chmod(path, 0o755);
  return path;
}

/** Retries while nothing listens yet (the start before the API's bind), up to a generous bound. */
async function whenListening<T>(ask: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await ask();
    } catch (e) {
      if (i >= 1200) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

describe("serveOllama while the router starts", () => {
  it("answers / and /api/version at once, holds /api/tags until the router is ready, and refuses foreign Host headers meanwhile", async () => {
    const root = await temp();
    const dir = await temp();
    await buildOllamaStore(root, [{ name: "small", model: await llamaFile(dir, 3), params: { num_ctx: 256 } }]);
    const gate = join(dir, "open");
    const port = await freePort();
    const starting = serveOllama({
      models: "all",
      store: new ModelStore(root),
      cache: { dir: await temp() },
      llamaServer: await gatedServer(dir, gate),
      args: SMALL_SERVER_ARGS,
      port,
    });
    let started = false;
    void starting.then(
      () => (started = true),
      () => undefined,
    );
    try {
      const version = await whenListening(() => raw(port, "/api/version"));
      expect(version.status).toBe(200);
      expect(JSON.parse(version.body)).toEqual({ version: OLLAMA_API_VERSION });
      expect(await raw(port, "/")).toEqual({ status: 200, body: "Ollama is running" });
      // the router is held at its gate: the start has not returned
      expect(started).toBe(false);
      // a page's DNS-rebound name is refused before anything else, starting or not
      expect((await raw(port, "/api/version", "evil.example.com")).status).toBe(403);
      // a request that needs the router waits for it, and is then served
      let tagsDone = false;
      const tags = raw(port, "/api/tags").finally(() => (tagsDone = true));
      await new Promise((r) => setTimeout(r, 200));
      expect(tagsDone).toBe(false);
      await writeFile(gate, "");
      const server = await starting;
      expect(server.port).toBe(port);
      const listed = await tags;
      expect(listed.status).toBe(200);
      expect((JSON.parse(listed.body) as { models: Array<{ name: string }> }).models.map((m) => m.name)).toEqual(["small:latest"]);
    } finally {
      await writeFile(gate, "").catch(() => undefined);
      await starting.then(
        (s) => s.stop(),
        () => undefined,
      );
    }
  }, 120_000);

  it("a start that fails frees the port, and a request held meanwhile is closed, not left hanging", async () => {
    const root = await temp();
    const dir = await temp();
    await buildOllamaStore(root, [{ name: "small", model: await llamaFile(dir, 3) }]);
    const gate = join(dir, "open");
    // a llama-server that exits before it listens, once let through
    const failing = join(dir, "failing-llama-server");
    await writeFile(failing, `#!/bin/sh\nwhile [ ! -e '${gate}' ]; do sleep 0.05; done\nexit 3\n`);
    await chmod(failing, 0o755);
    const port = await freePort();
    const starting = serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: failing, port });
    starting.catch(() => undefined);
    try {
      await whenListening(() => raw(port, "/api/version"));
      const held = raw(port, "/api/tags").then(
        (r) => r.status,
        (e: NodeJS.ErrnoException) => e.code,
      );
      await writeFile(gate, "");
      const err = await starting.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(BridgeError);
      expect((err as BridgeError).code).toBe("SERVER_START_FAILED");
      // closed (reset if it reached the API before the failure, refused if not): never an answer, never a hang
      expect(["ECONNRESET", "ECONNREFUSED"]).toContain(await held);
      await checkPortFree("127.0.0.1", port);
    } finally {
      await writeFile(gate, "").catch(() => undefined);
    }
  }, 120_000);
});
