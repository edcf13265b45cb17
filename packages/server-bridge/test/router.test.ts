import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { afterEach, describe, expect, it } from "vitest";
import { join } from "node:path";
import { writeGguf } from "@compat/gguf";
import { generateFixture, generateFixtureFiles, processExists, SMALL_SERVER_ARGS, until } from "@compat/testkit";
import { BridgeError, llamaCanonicalName, startRouter, type RouterServer } from "@compat/server-bridge";
import { cachePreparer, type ModelPreparer } from "@compat/prepare";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { chat, chatContent, llamaServerPath, tempDirs } from "./helpers";

const temp = tempDirs();
const running: RouterServer[] = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
});

describe("llama.cpp's preset section names", () => {
  it.each([
    ["gemma3:4b", "gemma3:4B"],
    ["x:8b-q4_K_M", "x:Q4_K_M"],
    ["x:Q8_0", "x:Q8_0"],
    ["nocolon", "nocolon"],
  ])("%s -> %s", (name, canonical) => expect(llamaCanonicalName(name)).toBe(canonical));
});

/** A store of one native model, and a preparer whose listing waits for `release` (as a slow store's reads would), recording what it prepares. */
async function heldStore() {
  const root = await temp();
  const dir = await temp();
  await buildOllamaStore(root, [{ name: "one:1", model: (await generateFixtureFiles("llama", { seed: 1, layout: "native" }, dir)).text, params: { num_ctx: 512 } }]);
  const store = new ModelStore(root);
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const prepared: string[] = [];
  const preparer: ModelPreparer = {
    list: async () => {
      await held;
      return store.list();
    },
    prepare: async (resolved) => {
      prepared.push(resolved.name);
      return cachePreparer({ cache: { dir: await temp() } }).prepare(resolved);
    },
  };
  return { store, dir, preparer, release, prepared };
}

describe("startRouter stopped while the store is read", () => {
  it("rejects with TRANSLATION_ABORTED at the signal, without waiting for the listing; prepares nothing after it and runs no llama-server", async () => {
    const { store, dir, preparer, release, prepared } = await heldStore();
    const ran = join(dir, "ran");
    const server = join(dir, "llama-server");
    await writeFile(server, `#!/bin/sh\ntouch '${ran}'\nexit 1\n`, { mode: 0o755 });
    expect((await store.list()).filter((e) => e.model).map((e) => e.name)).toEqual(["one:1"]);
    const ac = new AbortController();
    const starting = startRouter({ models: "all", store, mount: preparer, llamaServer: server, signal: ac.signal });
    ac.abort();
    const err = await starting.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BridgeError);
    expect((err as BridgeError).code).toBe("TRANSLATION_ABORTED");
    // the listing ends after the start has: no model is prepared, nothing is launched
    release();
    await new Promise((r) => setTimeout(r, 100));
    expect(prepared).toEqual([]);
    expect(existsSync(ran)).toBe(false);
  });
});

describe("startRouter: the router starts while the store is read", () => {
  it("llama-server listens before any model is known, and serves the models read meanwhile (a re-read of its preset)", async () => {
    const { store, preparer, release } = await heldStore();
    const log: string[] = [];
    let listening!: () => void;
    const heard = new Promise<void>((r) => (listening = r));
    const starting = startRouter({
      models: "all",
      store,
      mount: preparer,
      llamaServer: await llamaServerPath(),
      args: SMALL_SERVER_ARGS,
      onLog: (line) => {
        log.push(line);
        if (/listening on http/.test(line)) listening();
      },
    });
    // the listing is held until the router has said it listens: it started with no model
    await heard;
    release();
    const router = await starting;
    running.push(router);
    const listed = (await (await fetch(`${router.url}/v1/models`)).json()) as { data: Array<{ id: string; aliases?: string[] }> };
    expect(listed.data.flatMap((m) => [m.id, ...(m.aliases ?? [])])).toContain("one:1");
    const r = await chat(router.url, "one:1");
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });

  it("a router that fails to start ends the start at once: the listing is not waited for, and no model is prepared after", async () => {
    const { store, dir, preparer, release, prepared } = await heldStore();
    const server = join(dir, "llama-server");
    await writeFile(server, "#!/bin/sh\necho 'error: this llama-server cannot start' >&2\nexit 3\n", { mode: 0o755 });
    const err = await startRouter({ models: "all", store, mount: preparer, llamaServer: server }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BridgeError);
    expect((err as BridgeError).code).toBe("SERVER_START_FAILED");
    expect((err as BridgeError).message).toContain("this llama-server cannot start");
    // the listing ends after the start has: its models are not prepared
    release();
    await new Promise((r) => setTimeout(r, 100));
    expect(prepared).toEqual([]);
  });

  it("a signal while the store is read stops the router that was started, and leaves no process behind", async () => {
    const { store, dir, preparer } = await heldStore();
    // a llama-server that starts and never listens: it runs until it is stopped
    const server = join(dir, "llama-server");
    const pidFile = join(dir, "pid");
    await writeFile(server, `#!/bin/sh\necho $$ > '${pidFile}'\nexec sleep 600\n`, { mode: 0o755 });
    const ac = new AbortController();
    const starting = startRouter({ models: "all", store, mount: preparer, llamaServer: server, signal: ac.signal });
    const pid = await until("the stand-in llama-server's pid", async () => Number((await readFile(pidFile, "utf8").catch(() => "")).trim()) || undefined);
    ac.abort();
    await expect(starting).rejects.toMatchObject({ code: "TRANSLATION_ABORTED" });
    expect(processExists(pid)).toBe(false);
  });
});

describe("startRouter (real llama-server, router mode)", () => {
  it("serves every installed model under its Ollama name; two models answer by name in one run", async () => {
    const root = await temp();
    const dir = await temp();
    const gemma = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "1b" }, dir);
    // a llama.cpp-native GGUF without tokenizer.chat_template
    const native = generateFixture("llama", { seed: 1, layout: "native" });
    native.text.delete("tokenizer.chat_template");
    const nativePath = join(dir, "no-template.gguf");
    await writeGguf(native.text, nativePath);
    await buildOllamaStore(root, [
      { name: "gemma3:1b", model: gemma.text, params: { num_ctx: 512 } },
      // no tokenizer.chat_template in this GGUF: the Go template picks llama.cpp's built-in llama3 template
      {
        name: "someone/tiny-llama:q8",
        model: nativePath,
        params: { num_ctx: 512 },
        template: "{{ range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}",
      },
      // not servable: its model layer is not a GGUF; reported, not fatal
      { name: "broken:1", model: new Uint8Array(64) },
    ]);
    const status: string[] = [];
    const router = await startRouter({
      models: "all",
      store: new ModelStore(root),
      cache: { dir: await temp() },
      llamaServer: await llamaServerPath(),
      args: SMALL_SERVER_ARGS,
      onStatus: (l) => status.push(l),
      keepPreset: true,
    });
    running.push(router);
    expect(router.url).toBe(`http://127.0.0.1:${router.port}`);
    expect(router.models.find((m) => m.name === "broken:1")?.error).toBeDefined();
    expect(router.models.find((m) => m.name === "gemma3:1b")?.model?.translated).toBe(true);
    expect(router.models.find((m) => m.name === "someone/tiny-llama:q8")?.model?.translated).toBe(false);
    const preset = await readFile(router.presetPath, "utf8");
    expect(preset).toContain("[gemma3@1b]\nalias = gemma3:1b\n");
    expect(preset).toMatch(/\[someone\/tiny-llama@q8\]\nalias = someone\/tiny-llama:q8\n[^[]*chat-template = llama3\n/);

    const listed = (await (await fetch(`${router.url}/v1/models`)).json()) as { data: Array<{ id: string; aliases?: string[] }> };
    const names = listed.data.flatMap((m) => [m.id, ...(m.aliases ?? [])]);
    expect(names).toEqual(expect.arrayContaining(["gemma3:1b", "someone/tiny-llama:q8"]));

    for (const name of ["gemma3:1b", "someone/tiny-llama:q8"]) {
      const r = await chat(router.url, name);
      expect(r.status, `${name}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(typeof chatContent(r.body), JSON.stringify(r.body)).toBe("string");
    }
    // both were loaded, each as its own instance
    const after = (await (await fetch(`${router.url}/v1/models`)).json()) as { data: Array<{ id: string; aliases?: string[]; status?: { value?: string; args?: string[] } }> };
    const instance = (name: string) => after.data.find((m) => m.aliases?.includes(name));
    expect(instance("gemma3:1b")?.status?.value).toBe("loaded");
    expect(instance("someone/tiny-llama:q8")?.status?.value).toBe("loaded");
    // the translated model runs from its cache entry, the native one from its blob
    const modelArg = (name: string) => instance(name)!.status!.args![instance(name)!.status!.args!.indexOf("--model") + 1];
    expect(modelArg("gemma3:1b")).toBe(router.models.find((m) => m.name === "gemma3:1b")!.model!.modelPath);
    expect(modelArg("someone/tiny-llama:q8")).toMatch(/blobs\/sha256-[0-9a-f]{64}$/);
    expect(instance("someone/tiny-llama:q8")!.status!.args).toEqual(expect.arrayContaining(["--chat-template", "llama3"]));
    expect(instance("gemma3:1b")!.status!.args).not.toContain("--chat-template");
    const unknown = await chat(router.url, "not-installed:1");
    expect(unknown.status).toBeGreaterThanOrEqual(400);
  });
});
