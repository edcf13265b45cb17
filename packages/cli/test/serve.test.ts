import { execFileSync, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { findLlamaTools, generateFixture, generateFixtureFiles, until, writeWithZeroTail } from "@compat/testkit";
import { prepareModel, TranslationCache } from "@compat/prepare";
import { freePort } from "@compat/server-bridge";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { ensureDemoModel, spawnCli } from "./helpers";

const dirs: string[] = [];
const children: ChildProcess[] = [];
async function temp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "compat-cli-serve-"));
  dirs.push(d);
  return d;
}
beforeAll(ensureDemoModel);
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

function start(args: string[], env: Record<string, string> = {}) {
  const s = spawnCli(args, env);
  children.push(s.child);
  return s;
}

async function run(args: string[], env: Record<string, string> = {}) {
  const s = start(args, env);
  const { code } = await s.closed;
  return { code, ...s.out };
}

async function store(): Promise<{ root: string; fixtures: string }> {
  const root = await temp();
  const fixtures = await temp();
  const gemma = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "1b" }, fixtures);
  const gemma2 = await generateFixtureFiles("gemma3", { seed: 2, layout: "ollama", variant: "1b" }, fixtures);
  const native = await generateFixtureFiles("llama", { seed: 1, layout: "native" }, fixtures);
  await buildOllamaStore(root, [
    { name: "gemma3:1b", model: gemma.text, params: { num_ctx: 512 } },
    { name: "gemma3:other", model: gemma2.text, params: { num_ctx: 512 } },
    { name: "tiny-llama:q8", model: native.text },
    { name: "broken:1", model: new Uint8Array(64) },
  ]);
  return { root, fixtures };
}

const SMALL = ["--threads", "2", "--no-warmup"];

/** A llama-server that is the real one only once `gate` exists (the router's start, held). */
/**
 * `serve --all` over store()'s models with llama-server held at a gate: the wrapper (`dir`'s
 * gated-llama-server) runs the real one only once the file `gate` exists.
 */
async function startGatedServeAll(env: Record<string, string>): Promise<{ s: ReturnType<typeof start>; dir: string; gate: string }> {
  const { root } = await store();
  const tools = await findLlamaTools();
  const dir = await temp();
  const gate = join(dir, "open");
  const wrapper = join(dir, "gated-llama-server");
  await writeFile(wrapper, `#!/bin/sh\nwhile [ ! -e '${gate}' ]; do sleep 0.05; done\nexec '${tools.server}' "$@"\n`, { mode: 0o755 });
  const s = start(["serve", "--all", "--models", root, "--cache-dir", await temp(), "--llama-server", wrapper, "--", ...SMALL], env);
  return { s, dir, gate };
}

describe("ollama-compat ls", () => {
  it("lists installed models with size, architecture and status", async () => {
    const { root } = await store();
    const cacheDir = await temp();
    // gemma3:1b already translated into this cache (--cache-dir D keeps translations in D/translated)
    await prepareModel(await new ModelStore(root).resolve("gemma3:1b"), { cache: new TranslationCache({ dir: join(cacheDir, "translated") }) });
    const r = await run(["ls", "--models", root, "--cache-dir", cacheDir]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^NAME\s+SIZE\s+ARCH\s+STATUS$/);
    const row = (name: string) => lines.find((l) => l.startsWith(name + " "))!;
    expect(row("gemma3:1b")).toMatch(/\d+(\.\d)? [KMG]?B\s+gemma3\s+cached$/);
    expect(row("gemma3:other")).toMatch(/gemma3\s+translatable$/);
    expect(row("tiny-llama:q8")).toMatch(/llama\s+native$/);
    expect(row("broken:1")).toMatch(/not-supported/);
    const json = JSON.parse((await run(["ls", "--json", "--models", root, "--cache-dir", cacheDir])).stdout) as { models: Array<{ name: string; status: string }> };
    expect(json.models.map((m) => [m.name, m.status])).toEqual([
      ["broken:1", "not-supported"],
      ["gemma3:1b", "cached"],
      ["gemma3:other", "translatable"],
      ["tiny-llama:q8", "native"],
    ]);
  });

  it("inspect and detect take a model reference too", async () => {
    const { root } = await store();
    const r = await run(["detect", "gemma3:1b"], { OLLAMA_MODELS: root });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/gemma3 \(markers:/);
    const i = await run(["inspect", "tiny-llama:q8", "--json"], { OLLAMA_MODELS: root });
    expect(JSON.parse(i.stdout).summary.architecture).toBe("llama");
  });
});

describe("ollama-compat serve (real llama-server)", () => {
  it("prints the URL on its own line, serves chat, streams prefixed logs, and stops on SIGTERM", async () => {
    const { root } = await store();
    const tools = await findLlamaTools();
    const s = start(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--llama-server", tools.server, "--", ...SMALL]);
    const [url] = await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    expect(s.out.stderr).toMatch(/^\[llama-server\] /m);
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 3, temperature: 0, grammar: "root ::= [ -~]*" }),
    });
    expect(r.status, await r.clone().text()).toBe(200);
    const pid = Number((await s.waitFor(/llama-server \(pid (\d+)\)/, "stderr"))[1]);
    s.child.kill("SIGTERM");
    const { code } = await s.closed;
    expect(code).toBe(143);
    // llama-server is gone too
    expect(() => process.kill(pid, 0)).toThrow();
  });

  it("serve --all: Ollama's API on OLLAMA_HOST's address, the OpenAI routes beside it, models picked by their Ollama name", async () => {
    const { root } = await store();
    const tools = await findLlamaTools();
    const port = await freePort();
    const s = start(["serve", "--all", "--models", root, "--cache-dir", await temp(), "--llama-server", tools.server, "--", ...SMALL], { OLLAMA_HOST: `127.0.0.1:${port}` });
    const [url] = await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    expect(url).toBe(`http://127.0.0.1:${port}`);
    // the URL comes as the API answers; the router's readiness is said on stderr
    await s.waitFor(/Ollama API ready on http:\/\/127\.0\.0\.1:\d+/, "stderr");
    // the broken model is reported, not fatal
    expect(s.out.stderr).toMatch(/warning: broken:1 is not served/);
    const tags = (await (await fetch(`${url}/api/tags`)).json()) as { models: Array<{ name: string }> };
    expect(tags.models.map((m) => m.name).sort()).toEqual(["gemma3:1b", "gemma3:other", "tiny-llama:q8"]);
    for (const model of ["gemma3:other", "tiny-llama:q8"]) {
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 3, temperature: 0, grammar: "root ::= [ -~]*" }),
      });
      expect(r.status, await r.clone().text()).toBe(200);
    }
    s.child.kill("SIGINT");
    expect((await s.closed).code).toBe(130);
  });

  it("serve --all prints the URL once the API answers, before the router is up: /api/version answers, /api/tags waits for the router and is then served", async () => {
    const port = await freePort();
    const { s, gate } = await startGatedServeAll({ OLLAMA_HOST: `127.0.0.1:${port}` });
    const [url] = await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    expect(url).toBe(`http://127.0.0.1:${port}`);
    const version = await fetch(`${url}/api/version`);
    expect(version.status).toBe(200);
    expect(((await version.json()) as { version: string }).version).toMatch(/^\d+\.\d+\.\d+$/);
    // the router is held at its gate: not ready, and a request that needs it waits
    let tagsDone = false;
    const tags = fetch(`${url}/api/tags`).finally(() => (tagsDone = true));
    await new Promise((r) => setTimeout(r, 300));
    expect(tagsDone).toBe(false);
    expect(s.out.stderr).not.toMatch(/Ollama API ready/);
    await writeFile(gate, "");
    const listed = await tags;
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as { models: Array<{ name: string }> }).models.map((m) => m.name).sort()).toEqual(["gemma3:1b", "gemma3:other", "tiny-llama:q8"]);
    await s.waitFor(/Ollama API ready on http:\/\/127\.0\.0\.1:\d+ \(llama-server router, pid \d+\)/, "stderr");
    s.child.kill("SIGTERM");
    expect((await s.closed).code).toBe(143);
  });

  it("serve --all stopped (SIGTERM) after its URL, while the router starts: exit 143, no router left, its request closed rather than answered", async () => {
    const tmp = await temp();
    const { s, dir } = await startGatedServeAll({ OLLAMA_HOST: `127.0.0.1:${await freePort()}`, TMPDIR: tmp });
    const [url] = await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    const held = fetch(`${url}/api/tags`).then(
      (r) => r.status,
      () => "closed",
    );
    // the router's chain is running (held at its gate) before the signal
    await until("the router's folder", () => readdirSync(tmp).some((d) => d.startsWith("ollama-compat-router-")));
    s.child.kill("SIGTERM");
    const { code } = await s.closed;
    expect(code, s.out.stderr).toBe(143);
    expect(s.out.stderr).toMatch(/stopped/);
    expect(s.out.stderr).not.toMatch(/Ollama API ready/);
    expect(await held).toBe("closed");
    // the gated llama-server was stopped with it, and nothing of the start is left: no process, folder or mount
    expect(execFileSync("ps", ["-eo", "args"], { encoding: "utf8" })).not.toContain(join(dir, "gated-llama-server"));
    expect(readdirSync(tmp).filter((d) => /^ollama-compat-(router|mount)-/.test(d))).toEqual([]);
    expect(readFileSync("/proc/mounts", "utf8")).not.toContain(tmp);
  });

  it("8 simultaneous `serve` of the same model: one translation, all 8 serve chat, the entry byte-identical to a single run's", async () => {
    const { root } = await store();
    const tools = await findLlamaTools();
    const cacheDir = await temp();
    const translations = join(cacheDir, "translated");
    // Hold the entry's lock (as a live writer would) until all eight are past their cache
    // lookup and waiting for it: then they race for it, whatever their start-up times.
    const resolved = await new ModelStore(root).resolve("gemma3:1b");
    const lock = join(translations, "locks", `${new TranslationCache({ dir: translations }).keyFor(resolved.modelDigest!, "text")}.lock`);
    await mkdir(join(translations, "locks"), { recursive: true });
    await writeFile(lock, `${process.pid} test`);
    const launches = Array.from({ length: 8 }, () =>
      start(["serve", "gemma3:1b", "--models", root, "--cache-dir", cacheDir, "--no-mount", "--llama-server", tools.server, "--", "--threads", "1", "--no-warmup"]),
    );
    for (const s of launches) await s.waitFor(/^ollama-compat: translating gemma3:1b/m, "stderr", 600_000);
    await rm(lock);
    const urls = await Promise.all(launches.map(async (s) => (await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m, "stdout", 600_000))[0]));
    expect(new Set(urls).size).toBe(8);
    for (const url of urls) {
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0, grammar: "root ::= [ -~]*" }),
      });
      expect(r.status, await r.clone().text()).toBe(200);
    }
    // exactly one process translated; the seven others found its verified entry
    const said = launches.map((s) => /^ollama-compat: (translated|cached) gemma3:1b -> (.+)$/m.exec(s.out.stderr));
    expect(said.every((m) => m !== null), launches.map((s) => s.out.stderr.slice(0, 400)).join("\n---\n")).toBe(true);
    expect(said.filter((m) => m![1] === "translated")).toHaveLength(1);
    expect(said.filter((m) => m![1] === "cached")).toHaveLength(7);
    const entry = said[0]![2]!;
    expect(new Set(said.map((m) => m![2])).size).toBe(1);
    expect(await readdir(join(translations, "entries"))).toHaveLength(1);
    expect(await readdir(join(translations, "locks"))).toEqual([]);
    expect(await readdir(join(translations, "tmp"))).toEqual([]);
    for (const s of launches) s.child.kill("SIGTERM");
    for (const s of launches) expect((await s.closed).code).toBe(143);
    // a single launch into an empty cache writes the same bytes
    const single = await prepareModel(await new ModelStore(root).resolve("gemma3:1b"), { cache: new TranslationCache({ dir: await temp() }) });
    expect(single.cacheHit).toBe(false);
    expect((await readFile(entry)).equals(await readFile(single.modelPath))).toBe(true);
  }, 900_000);

  it("when llama-server dies, reports its exit and last log lines, exit 1", async () => {
    const { root } = await store();
    const tools = await findLlamaTools();
    const s = start(["serve", "tiny-llama:q8", "--models", root, "--cache-dir", await temp(), "--llama-server", tools.server, "--", ...SMALL, "--ctx-size", "512"]);
    await s.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    const pid = Number((await s.waitFor(/llama-server \(pid (\d+)\)/, "stderr"))[1]);
    process.kill(pid, "SIGKILL");
    const { code } = await s.closed;
    expect(code).toBe(1);
    expect(s.out.stderr).toMatch(/llama-server exited \(SIGKILL\); last lines:\n {2}\S/);
  });

  it("llama-server killed by SIGSEGV at warm-up: serve, verify and demo name the likely cause and the way around it, exit 1", async () => {
    // A stand-in dies as a native llama.cpp build did on an Intel host with AMX (see the
    // bridge's SERVER_CRASHED): llama.cpp's last lines, then a signal of its own.
    const { root } = await store();
    const dir = await temp();
    const crashing = join(dir, "llama-server");
    await writeFile(crashing, "#!/bin/sh\necho 'common_init_from_params: warming up the model with an empty run'\nkill -SEGV $$\n", { mode: 0o755 });
    const cause = /killed by SIGSEGV before it was ready: most likely its CPU backend's repacked weights/;
    const serve = await run(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--llama-server", crashing]);
    expect(serve.code).toBe(1);
    expect(serve.stderr).toMatch(cause);
    expect(serve.stderr).toContain("(run: ollama-compat serve gemma3:1b -- --no-repack)");
    const verify = await run(["verify", "gemma3:1b", "--llama-server", crashing], { OLLAMA_MODELS: root });
    expect(verify.code).toBe(1);
    expect(verify.stdout).toMatch(cause);
    expect(verify.stdout).toContain("(run: ollama-compat verify gemma3:1b -- --no-repack)");
    const demo = await run(["demo", "--llama-server", crashing]);
    expect(demo.code).toBe(1);
    expect(demo.stderr).toMatch(cause);
    expect(demo.stderr).toContain("(run: ollama-compat demo -- --no-repack)");
    // and the way around it is really there: the flags after -- reach llama-server
    const args = join(dir, "args");
    const recording = join(dir, "recording-llama-server");
    await writeFile(recording, `#!/bin/sh\necho "$@" > "${args}"\nkill -SEGV $$\n`, { mode: 0o755 });
    for (const cmd of [["verify", "gemma3:1b"], ["demo"]]) {
      await run([...cmd, "--llama-server", recording, "--", "--no-repack"], { OLLAMA_MODELS: root });
      expect(await readFile(args, "utf8"), cmd[0]).toMatch(/ --no-repack\n$/);
    }
  });

  it("faults are one line with a code: llama-server missing, port taken", async () => {
    const { root } = await store();
    const missing = await run(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--llama-server", "/nonexistent/llama-server"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/LLAMA_SERVER_NOT_FOUND/);
    const net = await import("node:net");
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", () => r()));
    try {
      const port = String((blocker.address() as { port: number }).port);
      const taken = await run(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--port", port, "--llama-server", (await findLlamaTools()).server]);
      expect(taken.code).toBe(1);
      expect(taken.stderr).toMatch(new RegExp(`PORT_IN_USE: port ${port}`));
    } finally {
      blocker.close();
    }
  });

  it("beyond loopback only with an API key: refused without one, and an empty key file is a usage error", async () => {
    const { root } = await store();
    const tools = await findLlamaTools();
    const exposed = await run(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--host", "0.0.0.0", "--llama-server", tools.server]);
    expect(exposed.code).toBe(1);
    expect(exposed.stderr).toMatch(/INSECURE_BIND: refusing to serve on 0\.0\.0\.0 without an API key/);
    const keyFile = join(await temp(), "key");
    await writeFile(keyFile, "\n");
    const empty = await run(["serve", "gemma3:1b", "--models", root, "--api-key-file", keyFile, "--llama-server", tools.server]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/--api-key-file .*empty/);
  });

  it("SIGTERM during translation: exits, and leaves no partial cache entry, staging file or lock", async () => {
    // An Ollama gemma3 file with one extra 768 MiB tensor of zeros (a sparse file on disk), so the
    // translation writes long enough to be interrupted.
    const root = await temp();
    const fixtures = await temp();
    const f = generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "1b" });
    const path = join(fixtures, "big.gguf");
    await writeWithZeroTail(f.text, path, 768 * 2 ** 20);
    await buildOllamaStore(root, [{ name: "big:1", model: path }]);
    const cacheDir = await temp();
    const s = start(["serve", "big:1", "--models", root, "--cache-dir", cacheDir, "--no-mount", "--llama-server", (await findLlamaTools()).server]);
    await s.waitFor(/writing text [\d.]+ \//, "stderr");
    s.child.kill("SIGTERM");
    const { code } = await s.closed;
    expect(code, s.out.stderr).toBe(143);
    expect(s.out.stderr).toMatch(/stopped/);
    for (const sub of ["entries", "tmp", "locks"]) expect(await readdir(join(cacheDir, "translated", sub)).catch(() => [])).toEqual([]);
  });
});
