/**
 * /api/pull on serveOllama, driven by the official `ollama` client against a real OCI registry
 * (Debian's docker-registry): Ollama's progress objects stream as the model downloads, and the
 * model is then listed and answers on the running server, with no restart; /api/copy and
 * /api/delete change the store as Ollama does.
 */
import { randomBytes } from "node:crypto";
import { readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ollama } from "ollama";
import { generateFixtureFiles, startOciRegistry, type OciRegistry, SMALL_SERVER_ARGS } from "@compat/testkit";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile, PRINTABLE } from "./ollama-helpers";

const temp = tempDirs();
let registry: OciRegistry;
let server: OllamaServer;
let ollama: Ollama;
let root: string;

beforeAll(async () => {
  registry = await startOciRegistry();
  root = await temp();
  const dir = await temp();
  await buildOllamaStore(root, [{ name: "llama3.2", model: await llamaFile(dir), params: { num_ctx: 512 } }]);
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
  ollama = new Ollama({ host: server.url });
}, 300_000);
afterAll(async () => {
  await server?.stop();
  await registry?.stop();
});

describe("/api/pull (official ollama client, real registry)", () => {
  it("streams Ollama's progress objects, then lists and serves the model without a restart", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 7, layout: "ollama", variant: "1b" }, await temp());
    const pushed = await registry.pushModel({ name: "library/gemma3:1b", model: fx.text, params: { num_ctx: 512 } });
    const events: Array<{ status: string; digest?: string; total?: number; completed?: number }> = [];
    for await (const p of await ollama.pull({ model: pushed.ref, insecure: true, stream: true })) events.push(p);
    expect(events[0]!.status).toBe("pulling manifest");
    expect(events.at(-1)!.status).toBe("success");
    const layer = pushed.layers[0]!;
    expect(events.filter((e) => e.digest === layer.digest).at(-1)).toMatchObject({ total: layer.size, completed: layer.size });
    expect((await ollama.list()).models.map((m) => m.name)).toContain(pushed.ref);
    expect(await answers(pushed.ref)).toBe(200);
    // stream false: one object; the model is there already
    expect(await ollama.pull({ model: pushed.ref, insecure: true, stream: false })).toEqual({ status: "success" });
    // a name the registry does not have: Ollama's words, a 500 (stream false)
    const missing = await ollama.pull({ model: `${registry.host}/library/nothing:1`, insecure: true, stream: false }).then(
      () => undefined,
      (e: { status_code?: number; error?: string }) => e,
    );
    expect(missing).toMatchObject({ status_code: 500, error: "pull model manifest: file does not exist" });
  });

  it("a corrupted layer: the error names it, nothing of it is kept, the model is not listed", async () => {
    const good = randomBytes(2 << 20);
    const pushed = await registry.pushModel({ name: "library/broken:1", model: good });
    const layer = pushed.layers[0]!;
    const bad = Buffer.from(good);
    bad[3]! ^= 1;
    await writeFile(registry.blobDataPath(layer.digest), bad);
    let message = "";
    try {
      for await (const _ of await ollama.pull({ model: pushed.ref, insecure: true, stream: true })) void _;
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain(layer.digest);
    expect(await readdir(join(root, "blobs"))).not.toContain(`sha256-${layer.digest.slice(7)}`);
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain(pushed.ref);
  });

  it("/api/copy and /api/delete with Ollama's semantics: a copy shares the blobs, a blob goes only when no manifest names it; pulled again, served again", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 8, layout: "ollama", variant: "1b" }, await temp());
    const pushed = await registry.pushModel({ name: "library/cycle:1", model: fx.text, params: { num_ctx: 512 } });
    expect(await ollama.pull({ model: pushed.ref, insecure: true, stream: false })).toEqual({ status: "success" });
    const blob = `sha256-${pushed.layers[0]!.digest.slice(7)}`;
    await ollama.copy({ source: pushed.ref, destination: "mine:copy" });
    expect((await ollama.list()).models.map((m) => m.name)).toEqual(expect.arrayContaining([pushed.ref, "mine:copy"]));
    expect(await answers("mine:copy")).toBe(200);
    await ollama.delete({ model: pushed.ref });
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain(pushed.ref);
    expect(await readdir(join(root, "blobs"))).toContain(blob); // the copy still names it
    await ollama.delete({ model: "mine:copy" });
    expect(await readdir(join(root, "blobs"))).not.toContain(blob);
    expect(await readdir(join(root, "manifests", registry.host, "library")).catch(() => [])).not.toContain("cycle");
    // the other models' blobs are untouched: llama3.2 still answers
    expect(await answers("llama3.2")).toBe(200);
    const gone = await ollama.delete({ model: "mine:copy" }).then(() => undefined, (e: { status_code?: number; error?: string }) => e);
    expect(gone).toMatchObject({ status_code: 404, error: "model 'mine:copy' not found" });
    // pulled again: its preset section replaced, served again
    expect(await ollama.pull({ model: pushed.ref, insecure: true, stream: false })).toEqual({ status: "success" });
    expect(await answers(pushed.ref)).toBe(200);
  });
});

/** A chat through the same server's /v1 route, printable output only (random weights say anything): its status. */
async function answers(model: string): Promise<number> {
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0, grammar: PRINTABLE }),
  });
  await r.text();
  return r.status;
}
