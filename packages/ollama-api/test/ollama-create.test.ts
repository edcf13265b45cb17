/**
 * /api/create (from a model of the store), /api/blobs uploads, and copy, create and re-pull over
 * a name that is served and loaded, on serveOllama with real llama-server, driven by the official
 * `ollama` client. The new layers and config are compared byte for byte with what Ollama's Go
 * encoder writes; that a system prompt is in effect is read from the prompt llama-server
 * evaluated (its token count), not from what random weights say.
 */
import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ollama, type CreateRequest } from "ollama";
import { generateFixture, generateFixtureFiles, startOciRegistry, type OciRegistry, SMALL_SERVER_ARGS } from "@compat/testkit";
import { GgmlType, GgufModel, writeGguf } from "@compat/gguf";
import { serveOllama, type OllamaServer } from "@compat/ollama-api";
import { buildOllamaStore, MediaType, ModelStore } from "@compat/store";
import { llamaServerPath, tempDirs } from "./helpers";
import { llamaFile, PRINTABLE } from "./ollama-helpers";

const temp = tempDirs();
let registry: OciRegistry;
let server: OllamaServer;
let ollama: Ollama;
let root: string;
let modelDigest: string;

const SYSTEM = "You are a pirate. Answer every question as a pirate would, with many nautical words.";
const TEMPLATE = "{{ if .System }}<<SYS>>{{ .System }}<</SYS>>{{ end }}{{ .Prompt }}";

beforeAll(async () => {
  registry = await startOciRegistry();
  root = await temp();
  const [built] = await buildOllamaStore(root, [{ name: "llama3.2", model: await llamaFile(await temp()), params: { num_ctx: 512 } }]);
  modelDigest = built!.layers[0]!.digest;
  server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, port: 0 });
  ollama = new Ollama({ host: server.url });
}, 300_000);
afterAll(async () => {
  await server?.stop();
  await registry?.stop();
});

describe("/api/create from a model of the store (official ollama client, real llama-server)", () => {
  it("streams Ollama's progress, writes the layers and config as Ollama does, and serves the model with its system prompt", async () => {
    const plain = await promptTokens("llama3.2");
    const statuses: string[] = [];
    const stream = await ollama.create({
      model: "pirate",
      from: "llama3.2",
      system: SYSTEM,
      template: TEMPLATE,
      parameters: { temperature: 0.25, stop: ["<end>"] },
      license: "MIT & more",
      messages: [{ role: "User", content: "ahoy" }],
      stream: true,
    });
    for await (const p of stream) statuses.push(p.status);
    expect(statuses[0]).toBe(`using existing layer ${modelDigest}`);
    expect(statuses.slice(-2)).toEqual(["writing manifest", "success"]);
    expect(statuses.filter((s) => s.startsWith("creating new layer sha256:"))).toHaveLength(5); // template, system, license, params, messages

    const text = await readFile(join(root, "manifests", "registry.ollama.ai", "library", "pirate", "latest"), "utf8");
    expect(text.endsWith("}\n")).toBe(true);
    const manifest = JSON.parse(text) as { config: { digest: string }; layers: Array<{ mediaType: string; digest: string; size: number; from?: string }> };
    expect(manifest.layers.map((l) => l.mediaType)).toEqual([MediaType.model, MediaType.template, MediaType.system, MediaType.license, MediaType.params, MediaType.messages]);
    expect(Object.keys(manifest.layers[0]!)).toEqual(["mediaType", "digest", "size", "from"]);
    expect(manifest.layers[0]).toMatchObject({ digest: modelDigest, from: "llama3.2:latest" });
    const blob = (mediaType: string) => readFile(join(root, "blobs", manifest.layers.find((l) => l.mediaType === mediaType)!.digest.replace(":", "-")), "utf8");
    // Go's json.Encoder: map keys sorted, <, > and & escaped, a newline at the end; params merged over the source's
    expect(await blob(MediaType.params)).toBe('{"num_ctx":512,"stop":["\\u003cend\\u003e"],"temperature":0.25}\n');
    expect(await blob(MediaType.messages)).toBe('[{"role":"user","content":"ahoy"}]\n');
    expect(await blob(MediaType.system)).toBe(SYSTEM);
    expect(await blob(MediaType.license)).toBe("MIT & more");
    const configText = await readFile(join(root, "blobs", manifest.config.digest.replace(":", "-")), "utf8");
    expect(configText.endsWith("}\n")).toBe(true);
    const config = JSON.parse(configText) as Record<string, unknown>;
    expect(Object.keys(config)).toEqual(["model_format", "model_family", "model_families", "model_type", "file_type", "architecture", "os"]);
    expect(config).toMatchObject({ model_format: "gguf", model_family: "llama", model_families: ["llama"], architecture: "amd64", os: "linux" });
    expect(config.model_type).toMatch(/^\d+(\.\d+)?[KMB]?$/);

    expect((await ollama.list()).models.map((m) => m.name)).toContain("pirate:latest");
    const show = await ollama.show({ model: "pirate" });
    expect(show.system).toBe(SYSTEM);
    expect(show.template).toBe(TEMPLATE);
    expect(show.parameters).toMatch(/temperature\s+0\.25/);
    expect(show.parameters).toMatch(/num_ctx\s+512/);
    expect(show.messages).toEqual([{ role: "user", content: "ahoy" }]);
    // the system prompt reaches llama-server: the same question is a longer prompt
    expect(await promptTokens("pirate")).toBeGreaterThan(plain);
    // and so do the messages layer's turns, put before the conversation as Ollama's chat does
    expect(await ollama.create({ model: "chatty", from: "llama3.2", messages: [{ role: "user", content: "ahoy" }, { role: "assistant", content: "ahoy matey" }], stream: false })).toEqual({ status: "success" });
    expect(await promptTokens("chatty")).toBeGreaterThan(plain);
  });

  it("create and copy over a served, loaded name: the new files answer at once, the old instance is gone, replaced layers go", async () => {
    const before = await promptTokens("pirate"); // loaded now
    const old = JSON.parse(await readFile(join(root, "manifests", "registry.ollama.ai", "library", "pirate", "latest"), "utf8")) as { layers: Array<{ mediaType: string; digest: string }> };
    const oldSystem = old.layers.find((l) => l.mediaType === MediaType.system)!.digest;
    const longer = `${SYSTEM} ${SYSTEM}`;
    // spelled otherwise, the installed name is the one replaced (Ollama's getExistingName)
    expect(await ollama.create({ model: "Pirate", from: "pirate", system: longer, stream: false })).toEqual({ status: "success" });
    expect(await readdir(join(root, "manifests", "registry.ollama.ai", "library"))).not.toContain("Pirate");
    expect((await ollama.ps()).models.map((m) => m.name)).not.toContain("pirate:latest");
    expect(await readdir(join(root, "blobs"))).not.toContain(oldSystem.replace(":", "-"));
    expect((await ollama.show({ model: "pirate" })).system).toBe(longer);
    expect(await promptTokens("pirate")).toBeGreaterThan(before);

    // copy over it (Ollama's CopyModel: the destination's manifest replaced): llama3.2's files, no system prompt
    await ollama.copy({ source: "llama3.2", destination: "pirate" });
    expect((await ollama.ps()).models.map((m) => m.name)).not.toContain("pirate:latest");
    expect((await ollama.show({ model: "pirate" })).system).toBeUndefined();
    expect(await promptTokens("pirate")).toBe(await promptTokens("llama3.2"));
  });

  it("adapters: a LoRA uploaded through /api/blobs (digest checked, atomic) becomes an adapter layer llama-server loads", async () => {
    const lora = await loraBytes();
    const digest = `sha256:${createHash("sha256").update(lora).digest("hex")}`;
    const blobUrl = `${server.url}/api/blobs/${digest}`;
    expect((await fetch(blobUrl, { method: "HEAD" })).status).toBe(404);
    const wrong = Buffer.from(lora);
    wrong[wrong.length - 1]! ^= 1;
    const refused = await fetch(blobUrl, { method: "POST", body: new Uint8Array(wrong) });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: string }).error).toContain("digest mismatch");
    expect((await fetch(blobUrl, { method: "HEAD" })).status).toBe(404);
    expect(await readdir(join(root, "blobs", ".ollama-compat-tmp")).catch(() => [])).toEqual([]);
    expect((await fetch(blobUrl, { method: "POST", body: new Uint8Array(lora) })).status).toBe(201);
    expect((await fetch(blobUrl, { method: "HEAD" })).status).toBe(200);
    expect((await fetch(blobUrl, { method: "POST", body: new Uint8Array(lora) })).status).toBe(200);

    expect(await ollama.create({ model: "tuned", from: "llama3.2", adapters: { "lora.gguf": digest }, stream: false })).toEqual({ status: "success" });
    const manifest = JSON.parse(await readFile(join(root, "manifests", "registry.ollama.ai", "library", "tuned", "latest"), "utf8")) as { layers: Array<Record<string, unknown>> };
    expect(manifest.layers.find((l) => l.mediaType === MediaType.adapter)).toEqual({ mediaType: MediaType.adapter, digest, size: lora.length, from: "lora.gguf" });
    expect(await answers("tuned")).toBe(200);

    // a GGUF that is not an adapter, quantize and files: refused with what to do instead
    const notAdapter = await ollama.create({ model: "bad", from: "llama3.2", adapters: { "x.gguf": modelDigest } }).then(() => undefined, (e: { status_code?: number; error?: string }) => e);
    expect(notAdapter).toMatchObject({ status_code: 400 });
    expect(notAdapter?.error).toContain('expected "adapter"');
    const quantize = await ollama.create({ model: "bad", from: "llama3.2", quantize: "q4_K_M" }).then(() => undefined, (e: { status_code?: number; error?: string }) => e);
    expect(quantize).toMatchObject({ status_code: 400 });
    expect(quantize?.error).toContain("llama-quantize");
    const files = await fetch(`${server.url}/api/create`, { method: "POST", body: JSON.stringify({ model: "bad", files: { "m.gguf": modelDigest } }) });
    expect(files.status).toBe(403);
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain("bad:latest");
  });

  it("from a model only in its registry: pulled first (its progress streamed, then the create's), both listed and served; from one in neither: Ollama's error", async () => {
    const fx = await generateFixtureFiles("gemma3", { seed: 11, layout: "ollama", variant: "1b" }, await temp());
    const pushed = await registry.pushModel({ name: "library/remote:1", model: fx.text, params: { num_ctx: 512 } });
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain(pushed.ref);
    // `insecure` (which Ollama's create does not take) lets the source come from this plain-HTTP registry
    const request = { model: "landlubber", from: pushed.ref, system: SYSTEM, insecure: true } as CreateRequest;
    const events: Array<{ status: string; digest?: string; total?: number; completed?: number }> = [];
    for await (const p of await ollama.create({ ...request, stream: true })) events.push(p);
    const statuses = events.map((e) => e.status);
    const layer = pushed.layers[0]!;
    // the pull's progress, as Ollama's PullModel streams it (its "success" left out: the client would stop reading there)
    expect(statuses[0]).toBe("pulling manifest");
    expect(events.filter((e) => e.digest === layer.digest).at(-1)).toMatchObject({ total: layer.size, completed: layer.size });
    const verified = statuses.indexOf("verifying sha256 digest");
    expect(statuses[verified + 1]).toBe("writing manifest");
    // then the create's, from the layers just pulled, and one success at the end
    expect(statuses[verified + 2]).toBe(`using existing layer ${layer.digest}`);
    expect(statuses.slice(-2)).toEqual(["writing manifest", "success"]);
    expect(statuses.filter((s) => s === "success")).toHaveLength(1);
    const names = (await ollama.list()).models.map((m) => m.name);
    expect(names).toEqual(expect.arrayContaining([pushed.ref, "landlubber:latest"]));
    expect((await ollama.show({ model: "landlubber" })).system).toBe(SYSTEM);
    expect(await answers(pushed.ref)).toBe(200);
    expect(await answers("landlubber")).toBe(200);

    // stream false: one object, once the source is pulled and the model created
    const second = await registry.pushModel({ name: "library/remote:2", model: fx.text, params: { num_ctx: 256 } });
    const whole = await fetch(`${server.url}/api/create`, { method: "POST", body: JSON.stringify({ ...request, model: "landlubber2", from: second.ref, stream: false }) });
    expect(whole.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await whole.text()).toBe('{"status":"success"}');
    expect((await ollama.list()).models.map((m) => m.name)).toEqual(expect.arrayContaining([second.ref, "landlubber2:latest"]));

    // in neither the store nor its registry: Ollama's error, a last line after the pull's first progress, or a 500 alone
    const missing = { model: "ghost", from: `${registry.host}/library/nothing:1`, insecure: true } as CreateRequest;
    const seen: string[] = [];
    const streamed = await (async () => {
      for await (const p of await ollama.create({ ...missing, stream: true })) seen.push(p.status);
    })().then(
      () => undefined,
      (e: Error) => e.message,
    );
    expect(seen).toEqual(["pulling manifest"]);
    expect(streamed).toBe("pull model manifest: file does not exist");
    const refused = await fetch(`${server.url}/api/create`, { method: "POST", body: JSON.stringify({ ...missing, stream: false }) });
    expect(refused.status).toBe(500);
    expect(await refused.json()).toEqual({ error: "pull model manifest: file does not exist" });
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain("ghost:latest");
    expect(await readdir(join(root, "manifests", registry.host, "library"))).toEqual(["remote"]); // no "nothing"
  });

  it("a re-pull of a served, loaded model that changed: the new version answers, the old instance is gone, and its blob with it", async () => {
    const v1 = await generateFixtureFiles("gemma3", { seed: 7, layout: "ollama", variant: "1b" }, await temp());
    const first = await registry.pushModel({ name: "library/repull:1", model: v1.text, params: { num_ctx: 512 } });
    expect(await ollama.pull({ model: first.ref, insecure: true, stream: false })).toEqual({ status: "success" });
    expect(await answers(first.ref)).toBe(200); // loaded
    const v2 = await generateFixtureFiles("gemma3", { seed: 9, layout: "ollama", variant: "1b" }, await temp());
    const second = await registry.pushModel({ name: "library/repull:1", model: v2.text, params: { num_ctx: 512 } });
    const oldBlob = first.layers[0]!.digest.replace(":", "-");
    expect(await ollama.pull({ model: second.ref, insecure: true, stream: false })).toEqual({ status: "success" });
    expect((await ollama.ps()).models.map((m) => m.name)).not.toContain(first.ref);
    expect(await readdir(join(root, "blobs"))).not.toContain(oldBlob);
    expect(await answers(second.ref)).toBe(200);
    const digest = createHash("sha256").update(second.manifest).digest("hex");
    expect((await ollama.ps()).models.find((m) => m.name === second.ref)?.digest).toBe(digest);
  });
});

/** The prompt tokens llama-server evaluated for one user turn (system prompt and template included). */
async function promptTokens(model: string): Promise<number> {
  const r = await ollama.chat({ model, messages: [{ role: "user", content: "Where is the treasure?" }], options: { num_predict: 1, temperature: 0 } });
  return r.prompt_eval_count;
}

/** A chat through the same server's /v1 route, printable output only (random weights say anything): its status. */
async function answers(model: string): Promise<number> {
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0, grammar: PRINTABLE }),
  });
  await r.text();
  return r.status;
}

/** A rank-2 LoRA GGUF for the llama fixture's first attention query (zero weights), as llama.cpp's convert_lora_to_gguf.py lays one out. */
async function loraBytes(): Promise<Buffer> {
  const q = generateFixture("llama", { seed: 1, layout: "native" }).text.tensor("blk.0.attn_q.weight");
  const [inputs, outputs] = q.shape.map(Number) as [number, number];
  const rank = 2;
  const m = GgufModel.create();
  m.setString("general.architecture", "llama").setString("general.type", "adapter").setString("adapter.type", "lora").setF32("adapter.lora.alpha", rank);
  m.addTensor({ name: "blk.0.attn_q.weight.lora_a", type: GgmlType.F32, shape: [inputs, rank], data: { kind: "bytes", bytes: new Uint8Array(inputs * rank * 4) } });
  m.addTensor({ name: "blk.0.attn_q.weight.lora_b", type: GgmlType.F32, shape: [rank, outputs], data: { kind: "bytes", bytes: new Uint8Array(rank * outputs * 4) } });
  const path = join(await temp(), "lora.gguf");
  await writeGguf(m, path);
  return readFile(path);
}
