import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { generateFixtureFiles, SMALL_SERVER_ARGS } from "@compat/testkit";
import { type GgufError, readGguf } from "@compat/gguf";
import { prepareModel, TranslationCache } from "@compat/prepare";
import { BridgeError, LlamaChild, modelArgs, startServer, type RunningServer } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore, StoreError } from "@compat/store";
import { launchOnProbedPort } from "../src/server";
import { chat, chatContent, llamaServerPath, tempDirs } from "./helpers";

const temp = tempDirs();
const running: RunningServer[] = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
});

async function fixtureStore(models: Array<{ name: string; arch: string; variant?: string; params?: Record<string, unknown> }>): Promise<ModelStore> {
  const root = await temp();
  const dir = await temp();
  const specs = [];
  for (const m of models) {
    const fx = await generateFixtureFiles(m.arch, { seed: 1, layout: "ollama", ...(m.variant ? { variant: m.variant } : {}) }, dir);
    specs.push({ name: m.name, model: fx.text, params: m.params ?? { num_ctx: 512 } });
  }
  await buildOllamaStore(root, specs);
  return new ModelStore(root);
}

async function codeOf<E extends Error = BridgeError>(p: Promise<unknown>, type: new (...args: never[]) => E = BridgeError as never): Promise<E> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(type);
  return e as E;
}

describe("the port in llama-server's line", () => {
  it.each([
    ["0.00.005.100 I srv  llama_server: listening on http://127.0.0.1:39123", 39123],
    ["main: listening on http://[::1]:8080", 8080],
    ["\u001b[32mI srv  llama_server: listening on http://0.0.0.0:5001\u001b[0m", 5001],
    ["llama_server: listening on unix:///tmp/llama.sock", undefined],
    ["general.name str = listening on nothing", undefined],
  ])("%s -> %s", async (line, port) => {
    const child = new LlamaChild({ command: "/bin/sh", args: ["-c", 'printf "%s\\n" "$0"', line] });
    await child.exited;
    expect(child.announcedPort).toBe(port);
  });
});

describe("startServer (real llama-server)", () => {
  it("serves a translated Ollama text model: chat completion, listed under its Ollama name", async () => {
    const store = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b", params: { num_ctx: 512, stop: ["<end_of_turn>"], temperature: 0.7 } }]);
    const cache = new TranslationCache({ dir: await temp() });
    const lines: string[] = [];
    const server = await startServer({ model: "gemma3:1b", store, cache, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, onLog: (l) => lines.push(l) });
    running.push(server);
    expect(server.url).toBe(`http://127.0.0.1:${server.port}`);
    expect(server.model.translated).toBe(true);
    expect(server.command).toEqual(expect.arrayContaining(["--ctx-size", "512", "--reverse-prompt", "<end_of_turn>", "--temp", "0.7", "--host", "127.0.0.1"]));

    const r = await chat(server.url, "gemma3:1b");
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(typeof chatContent(r.body), JSON.stringify(r.body)).toBe("string");
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain("gemma3:1b");
    expect(lines.length).toBeGreaterThan(0);

    const exit = await server.stop();
    expect(exit.code === 0 || exit.signal === "SIGTERM").toBe(true);
  });

  it("a file llama.cpp reads but our reader refuses (a token that is not UTF-8) is served as it is", async () => {
    // gguf.cpp keeps strings as raw bytes; our reader validates UTF-8. Such a file cannot be
    // recognised as Ollama's, so the bridge hands it to llama-server untouched.
    const dir = await temp();
    const fx = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, dir);
    const bytes = await readFile(fx.text);
    breakAToken(bytes);
    await writeFile(fx.text, bytes);
    expect(await readGguf(fx.text).then(() => "read", (e: GgufError) => e.code)).toBe("INVALID_UTF8");
    const root = await temp();
    await buildOllamaStore(root, [{ name: "odd-vocab", model: fx.text, params: { num_ctx: 512 } }]);
    const status: string[] = [];
    const server = await startServer({ model: "odd-vocab", store: new ModelStore(root), cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS, onStatus: (l) => status.push(l) });
    running.push(server);
    expect(server.model.translated).toBe(false);
    expect(status.join("\n")).toMatch(/not translated: .*not valid UTF-8; llama-server reads odd-vocab:latest as it is/);
    // /completion has no chat parser: any bytes the model writes are an answer
    const r = await fetch(`${server.url}/completion`, { method: "POST", body: JSON.stringify({ prompt: "hello", n_predict: 4 }) });
    const body = await r.text();
    expect(r.status, body).toBe(200);
    expect(JSON.parse(body), body).toMatchObject({ content: expect.any(String), tokens_predicted: expect.any(Number), stop: true });
    expect(JSON.parse(body).tokens_predicted, body).toBeLessThanOrEqual(4);
    expect((await readFile(server.model.modelPath)).equals(bytes)).toBe(true);
  });

  it("serves an embedding model with --embedding: /v1/embeddings answers vectors", async () => {
    const store = await fixtureStore([{ name: "embeddinggemma", arch: "embeddinggemma" }]);
    const server = await startServer({ model: "embeddinggemma", store, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS });
    running.push(server);
    expect(server.model.embedding).toBe(true);
    expect(server.command).toContain("--embedding");
    const r = await fetch(`${server.url}/v1/embeddings`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input: "hello world", model: "embeddinggemma:latest" }),
    });
    const body = (await r.json()) as { data: Array<{ embedding: number[] }> };
    expect(r.status, JSON.stringify(body)).toBe(200);
    expect(body.data[0]!.embedding.length).toBeGreaterThan(0);
    expect(body.data[0]!.embedding.every((x) => Number.isFinite(x))).toBe(true);
  });

  it("serves a vision model with its projector (@compat/clip's view, cached): an image chat completion", async () => {
    const store = await fixtureStore([{ name: "gemma3:4b", arch: "gemma3", variant: "4b-vision", params: { num_ctx: 1024 } }]);
    const server = await startServer({ model: "gemma3:4b", store, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS });
    running.push(server);
    expect(server.model.mmproj).toBeDefined();
    expect(server.command).toEqual(expect.arrayContaining(["--mmproj", server.model.mmproj!]));
    const side = 16;
    const ppm = Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), Buffer.alloc(side * side * 3, 128)]);
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url: `data:image/ppm;base64,${ppm.toString("base64")}` } }] }],
        max_tokens: 3,
        temperature: 0,
        grammar: "root ::= [ -~]*",
      }),
    });
    const body = (await r.json()) as Record<string, unknown>;
    expect(r.status, JSON.stringify(body)).toBe(200);
    // the image became prompt tokens: more than the same question without it
    const textOnly = await chat(server.url, "gemma3:4b", "what is this?");
    const tokens = (b: Record<string, unknown>) => (b.usage as { prompt_tokens: number }).prompt_tokens;
    expect(tokens(body)).toBeGreaterThan(tokens(textOnly.body));
  });

  it("serves a non-Ollama GGUF from its original path, with no cache entry", async () => {
    const dir = await temp();
    const fx = await generateFixtureFiles("gemma3", { seed: 2, layout: "native", variant: "1b" }, dir);
    const cacheDir = join(dir, "cache");
    const server = await startServer({ model: fx.text, cache: { dir: cacheDir }, llamaServer: await llamaServerPath(), args: [...SMALL_SERVER_ARGS, "--ctx-size", "512"] });
    running.push(server);
    expect(server.model).toMatchObject({ translated: false, modelPath: fx.text });
    expect(server.command[server.command.indexOf("--model") + 1]).toBe(fx.text);
    expect(existsSync(cacheDir)).toBe(false);
    const r = await chat(server.url, undefined);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });

  it("faults: llama-server missing (before any translation), unknown reference", async () => {
    const store = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b" }]);
    const cacheDir = join(await temp(), "cache");
    const e = await codeOf(startServer({ model: "gemma3:1b", store, cache: { dir: cacheDir }, llamaServer: "/nonexistent/llama-server" }));
    expect(e.code).toBe("LLAMA_SERVER_NOT_FOUND");
    expect(existsSync(cacheDir)).toBe(false);
    const env = { PATH: "/nonexistent", HOME: "/nonexistent", LLAMA_SERVER: "", OLLAMA_COMPAT_CACHE: "/nonexistent" };
    expect((await codeOf(startServer({ model: "gemma3:1b", store, env, cache: { dir: cacheDir } }))).code).toBe("LLAMA_SERVER_NOT_FOUND");
    expect((await codeOf(startServer({ model: "nope:1", store, llamaServer: await llamaServerPath() }), StoreError)).code).toBe("UNKNOWN_MODEL");
  });

  it("fault: llama-server crashing at start is reported with its exit code and last log lines", async () => {
    // gpt-oss as Ollama wrote it, with translation off: stock llama.cpp rejects the architecture
    const store = await fixtureStore([{ name: "gpt-oss:20b", arch: "gptoss" }]);
    const e = await codeOf(
      startServer({ model: "gpt-oss:20b", store, cache: { dir: await temp() }, env: { ...process.env, OLLAMA_LLAMA_CPP_COMPAT: "0" }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS }),
    );
    expect(e.code).toBe("SERVER_START_FAILED");
    expect(e.details.exitCode).not.toBe(0);
    expect(e.message).toContain("unknown model architecture: 'gptoss'");
  });

  it("llama-server binds a port of the kernel's choosing and the bridge reads it from its log, or from /proc with the log off: launches at once each reach their own server", async () => {
    // The race this closes: a probed port, closed again, handed to two launches at once; the
    // loser's health check then got the winner's 200 and it served another process's model.
    // Two of the four print nothing (--log-disable): their ports come from /proc.
    const store = await fixtureStore([
      { name: "gemma3:1b", arch: "gemma3", variant: "1b" },
      { name: "llama3.2:1b", arch: "llama" },
    ]);
    const cache = new TranslationCache({ dir: await temp() });
    const names = ["gemma3:1b", "llama3.2:1b", "gemma3:1b", "llama3.2:1b"];
    const llamaServer = await llamaServerPath();
    const logs = names.map(() => [] as string[]);
    const servers = await Promise.all(
      names.map((model, i) => startServer({ model, store, cache, llamaServer, args: [...SMALL_SERVER_ARGS, ...(i >= 2 ? ["--log-disable"] : [])], onLog: (l) => logs[i]!.push(l) })),
    );
    expect(logs.map((l) => l.some((line) => line.includes(`listening on http://127.0.0.1:`)))).toEqual([true, true, false, false]);
    running.push(...servers);
    expect(new Set(servers.map((s) => s.port)).size).toBe(servers.length);
    for (const [i, server] of servers.entries()) {
      expect(server.command.join(" ")).toContain("--port 0");
      const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
      expect(models.data.map((m) => m.id)).toEqual([names[i]]);
    }
  });

  describe("where /proc cannot tell a child's port (a probed port, retried)", () => {
    async function prepared(): Promise<string[]> {
      const store = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b" }]);
      return modelArgs(await prepareModel(await store.resolve("gemma3:1b"), { cache: { dir: await temp() } }));
    }

    it("a chosen port taken before llama-server binds it: the launch retries on another free port", async () => {
      // The race of two launches at once, made deterministic: on its first start a wrapper has
      // another process take the port llama-server was given, then runs the real llama-server on
      // it. Whether llama-server's "couldn't bind" line is logged or lost at its exit, the port is
      // seen held and the launch goes on to another.
      const dir = await temp();
      const wrapper = join(dir, "llama-server");
      const starts = join(dir, "starts");
      const bound = join(dir, "bound");
      await writeFile(wrapper, portTakenFirst(dir, starts, bound, `exec "${await llamaServerPath()}" "$@"`, await llamaServerPath()), { mode: 0o755 });
      try {
        const server = await launchOnProbedPort("127.0.0.1", wrapper, [...(await prepared()), ...SMALL_SERVER_ARGS], {});
        running.push(server);
        expect((await readFile(starts, "utf8")).trim().split("\n")).toHaveLength(2);
        expect(server.port).not.toBe(Number(await readFile(bound, "utf8")));
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
      } finally {
        process.kill(Number(await readFile(join(dir, "holder.pid"), "utf8")));
      }
    });

    it("a port taken under llama-server that then exits printing nothing (its log lost at exit): the launch retries on another port", async () => {
      // First start: a stand-in takes the port it was given from another process and exits 1
      // silently, as llama-server does when its asynchronous log is lost; later starts run the real one.
      const dir = await temp();
      const wrapper = join(dir, "llama-server");
      const starts = join(dir, "starts");
      const bound = join(dir, "bound");
      await writeFile(wrapper, portTakenFirst(dir, starts, bound, "exit 1", await llamaServerPath()), { mode: 0o755 });
      try {
        const server = await launchOnProbedPort("127.0.0.1", wrapper, [...(await prepared()), ...SMALL_SERVER_ARGS], {});
        running.push(server);
        expect((await readFile(starts, "utf8")).trim().split("\n")).toHaveLength(2);
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
      } finally {
        process.kill(Number(await readFile(join(dir, "holder.pid"), "utf8")));
      }
    });
  });

  it("llama-server killed by SIGSEGV at warm-up is SERVER_CRASHED, naming the repacked weights and --no-repack", async () => {
    // What a native llama.cpp build did on an Intel host with AMX for every Q8_0 model; a
    // stand-in dies the same way (a signal of its own, after llama.cpp's last lines).
    const dir = await temp();
    const crashing = join(dir, "llama-server");
    await writeFile(crashing, "#!/bin/sh\necho 'load_tensors:          CPU model buffer size =     1.00 MiB'\necho 'common_init_from_params: warming up the model with an empty run'\nkill -SEGV $$\n", { mode: 0o755 });
    const store = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b" }]);
    const e = await codeOf(startServer({ model: "gemma3:1b", store, cache: { dir: await temp() }, llamaServer: crashing, args: SMALL_SERVER_ARGS }));
    expect(e.code).toBe("SERVER_CRASHED");
    expect(e.details).toMatchObject({ signal: "SIGSEGV", workaround: "--no-repack" });
    expect(e.message.split("\n")[0]).toMatch(/killed by SIGSEGV before it was ready: most likely its CPU backend's repacked weights .*; start it with --no-repack$/);
    expect(e.message).toContain("warming up the model");
  });

  it("a silent exit with its port free stays SERVER_START_FAILED, saying the output was lost", async () => {
    const dir = await temp();
    const silent = join(dir, "llama-server");
    await writeFile(silent, "#!/bin/sh\nexit 1\n", { mode: 0o755 });
    const store = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b" }]);
    const e = await codeOf(startServer({ model: "gemma3:1b", store, cache: { dir: await temp() }, llamaServer: silent, args: SMALL_SERVER_ARGS }));
    expect(e.code).toBe("SERVER_START_FAILED");
    expect(e.details.exitCode).toBe(1);
    expect(e.message).toMatch(/no output: llama\.cpp's asynchronous logger/);
  });

  it("fault: a port already taken is PORT_IN_USE", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", () => r()));
    const port = (blocker.address() as { port: number }).port;
    try {
      const store = await fixtureStore([{ name: "gemma3:1b", arch: "gemma3", variant: "1b" }]);
      const e = await codeOf(startServer({ model: "gemma3:1b", store, port, cache: { dir: await temp() }, llamaServer: await llamaServerPath(), args: SMALL_SERVER_ARGS }));
      expect(e.code).toBe("PORT_IN_USE");
      expect(e.message).toContain(String(port));
    } finally {
      blocker.close();
    }
  });
});

/** Turns the second byte of the first all-lowercase token of 3+ letters into 0xff (same length). */
function breakAToken(b: Buffer): void {
  const key = Buffer.from("tokenizer.ggml.tokens");
  let p = b.indexOf(key) + key.length + 4 + 4 + 8; // value type, item type, count
  for (;;) {
    const len = Number(b.readBigUInt64LE(p));
    if (len >= 3 && /^[a-z]+$/.test(b.subarray(p + 8, p + 8 + len).toString("latin1"))) {
      b[p + 9] = 0xff;
      return;
    }
    p += 8 + len;
  }
}

/**
 * A stand-in for llama-server (a shell script) that, on its first start only, has another
 * process take the port it was given (`--port N`; N is then in `bound`, the holder's pid in
 * DIR/holder.pid) and then runs `first`; every later start runs the real llama-server.
 */
function portTakenFirst(dir: string, starts: string, bound: string, first: string, llamaServer: string): string {
  const holder = `require("net").createServer().listen(Number(process.argv[1]), "127.0.0.1", () => require("fs").writeFileSync(${JSON.stringify(bound)}, process.argv[1])); setTimeout(() => {}, 60000)`;
  return `#!/bin/sh
echo start >> "${starts}"
if [ "$(wc -l < "${starts}")" -eq 1 ]; then
  port=""; prev=""
  for a in "$@"; do [ "$prev" = "--port" ] && port=$a; prev=$a; done
  "${process.execPath}" -e '${holder}' "$port" >/dev/null 2>&1 &
  echo $! > "${dir}/holder.pid"
  while [ ! -s "${bound}" ]; do sleep 0.05; done
  ${first}
fi
exec "${llamaServer}" "$@"
`;
}
