/**
 * The traps a new user walked into (issue 32), each walked into again the same way: the real
 * binary (from source) on a store built by the testkit, the real llama-server where the trap
 * was in talking to it, and a stand-in llama-server where only what happens before it matters.
 */
import type { ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { buildOllamaStore, fetchRefusesPort } from "@compat/store";
import { findLlamaTools, generateFixture, generateFixtureFiles, writeWithZeroTail } from "@compat/testkit";
import type { CliIo } from "../src/io";
import { cacheProgress } from "../src/progress";
import { httpGet, spawnCli } from "./helpers";

const dirs: string[] = [];
const children: ChildProcess[] = [];
async function temp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "compat-cli-traps-"));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

function start(args: string[], env: Record<string, string | undefined> = {}) {
  const s = spawnCli(args, env);
  children.push(s.child);
  return s;
}

async function run(args: string[], env: Record<string, string | undefined> = {}) {
  const s = start(args, env);
  const { code } = await s.closed;
  return { code, ...s.out };
}

/** A store with one Ollama-format text model that needs translating. */
async function store(): Promise<string> {
  const root = await temp();
  const gemma = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "1b" }, await temp());
  await buildOllamaStore(root, [{ name: "gemma3:1b", model: gemma.text, params: { num_ctx: 512 } }]);
  return root;
}

/** A stand-in llama-server that prints `said` (nothing when empty) and exits 1, as one refusing its arguments does. */
async function refusingServer(said: string): Promise<string> {
  const path = join(await temp(), "llama-server");
  await writeFile(path, `#!/bin/sh\n${said ? `echo '${said}' >&2\n` : ""}exit 1\n`, { mode: 0o755 });
  return path;
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}

const SMALL = ["--threads", "2", "--no-warmup"];

describe("serve --port on a port fetch() refuses (6000, 22, ...)", () => {
  it("is healthy and prints its URL (the health check does not use fetch), and warns that fetch-based clients cannot reach it", async () => {
    let port: number | undefined;
    for (const p of [6000, 6665, 6666, 6667, 6668, 6669, 10080]) {
      if (await portFree(p)) {
        port = p;
        break;
      }
    }
    expect(port, "one of the fetch-refused ports must be free here").toBeDefined();
    const tools = await findLlamaTools();
    // before the fix this waited for the start timeout: 120 s here, then SERVER_START_TIMEOUT
    const s = start(["serve", "gemma3:1b", "--models", await store(), "--cache-dir", await temp(), "--port", String(port), "--start-timeout", "120", "--llama-server", tools.server, "--", ...SMALL]);
    const [url] = await s.waitFor(new RegExp(`^http://127\\.0\\.0\\.1:${port}$`, "m"), "stdout", 150_000);
    expect(s.out.stderr).toMatch(new RegExp(`warning: --port ${port} is one of the ports browsers and fetch\\(\\) refuse`));
    // what curl sees
    const health = await httpGet(`${url}/health`);
    expect(health.status, health.body).toBe(200);
    // and what the warning is about
    await expect(fetch(`${url}/health`)).rejects.toThrow();
    s.child.kill("SIGTERM");
    expect((await s.closed).code).toBe(143);
  }, 200_000);

  it("the list of refused ports is Node's fetch's own", async () => {
    const refused = async (port: number) => {
      try {
        // nothing listens on port 1..; a refused port fails before any connection, with "bad port"
        await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(5_000) });
        return false;
      } catch (e) {
        return /bad port/i.test(String((e as { cause?: unknown }).cause ?? e));
      }
    };
    const listed = [1, 22, 25, 6000, 6566, 6665, 6669, 6679, 6697, 10080, 4045, 5060, 5061];
    for (const p of listed) {
      expect(fetchRefusesPort(p), `${p}`).toBe(true);
      expect(await refused(p), `${p}`).toBe(true);
    }
    for (const p of [80, 443, 5999, 6001, 8080, 11434, 33000, 65535]) {
      expect(fetchRefusesPort(p), `${p}`).toBe(false);
      expect(await refused(p), `${p}`).toBe(false);
    }
  });
});

describe("serve MODEL --all", () => {
  it("is a usage error naming both, before anything is translated", async () => {
    const cache = await temp();
    const r = await run(["serve", "gemma3:1b", "--all", "--models", await store(), "--cache-dir", cache, "--llama-server", await refusingServer("")]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/--all serves every installed model, and gemma3:1b names one: give MODEL or --all, not both/);
    expect(await readdir(cache)).toEqual([]);
  });

  it("arguments after -- still go to llama-server (serve --all -- ARGS, serve MODEL -- ARGS)", async () => {
    const args = join(await temp(), "args");
    const recording = join(await temp(), "llama-server");
    await writeFile(recording, `#!/bin/sh\necho "$@" > "${args}"\nexit 1\n`, { mode: 0o755 });
    const root = await store();
    const { readFile } = await import("node:fs/promises");
    // --port 0: not Ollama's 11434, which another process here may hold
    await run(["serve", "--all", "--port", "0", "--models", root, "--cache-dir", await temp(), "--llama-server", recording, "--", "--threads", "3"]);
    const routerArgs = await readFile(args, "utf8");
    expect(routerArgs).toMatch(/--models-preset \S+/);
    expect(routerArgs).toMatch(/ --threads 3\n$/);
    await run(["serve", "gemma3:1b", "--models", root, "--cache-dir", await temp(), "--llama-server", recording, "--", "--threads", "5"]);
    expect(await readFile(args, "utf8")).toMatch(/ --threads 5\n$/);
  });
});

describe("llama-server exits before it is ready", () => {
  it("the error line carries llama.cpp's reason, not an empty 'before it was ready:'", async () => {
    const r = await run(["serve", "gemma3:1b", "--models", await store(), "--cache-dir", await temp(), "--llama-server", await refusingServer("error: invalid argument: --frobnicate")]);
    expect(r.code).toBe(1);
    const last = r.stderr.trim().split("\n").pop()!;
    expect(last).toMatch(/^ollama-compat: SERVER_START_FAILED: llama-server exited \(1\) before it was ready: error: invalid argument: --frobnicate$/);
  });

  it("and says so when llama.cpp printed nothing", async () => {
    const r = await run(["serve", "gemma3:1b", "--models", await store(), "--cache-dir", await temp(), "--llama-server", await refusingServer("")]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n").pop()).toMatch(/before it was ready: it printed nothing \(llama\.cpp's logger can lose/);
  });
});

describe("status lines", () => {
  it("a cache hit says 'cached', never 'translating'", async () => {
    const root = await store();
    const cache = await temp();
    const server = await refusingServer("error: stand-in");
    const first = await run(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", cache, "--llama-server", server]);
    expect(first.stderr).toMatch(/^ollama-compat: translating gemma3:1b \(gemma3\)$/m);
    expect(first.stderr).toMatch(/^ollama-compat: translated gemma3:1b -> /m);
    const second = await run(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", cache, "--llama-server", server]);
    expect(second.stderr).toMatch(/^ollama-compat: cached gemma3:1b -> /m);
    expect(second.stderr).not.toMatch(/translating/);
  });

  it("on a stderr that is not a terminal: a line per tenth of a big file, none repeated; nothing for a small one", async () => {
    const root = await temp();
    const path = join(await temp(), "big.gguf");
    await writeWithZeroTail(generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "1b" }).text, path, 64 * 2 ** 20);
    await buildOllamaStore(root, [{ name: "big:1", model: path }]);
    const r = await run(["serve", "big:1", "--no-mount", "--models", root, "--cache-dir", await temp(), "--llama-server", await refusingServer("error: stand-in")]);
    const lines = r.stderr.split("\n").filter((l) => l.includes("writing"));
    expect(lines.length, r.stderr).toBeGreaterThanOrEqual(2);
    expect(lines.length).toBeLessThanOrEqual(11);
    expect(new Set(lines).size).toBe(lines.length);
    for (const l of lines) expect(l).toMatch(/^ollama-compat: writing text [\d.]+ \/ 64\.\d MiB \(\d+%\)$/);
    expect(lines.at(-1)).toMatch(/\(100%\)$/);
    const small = await run(["serve", "gemma3:1b", "--no-mount", "--models", await store(), "--cache-dir", await temp(), "--llama-server", await refusingServer("error: stand-in")]);
    expect(small.stderr).not.toMatch(/writing/);
  });

  it("the progress of a file is drawn once, whatever the writer reports twice", () => {
    const said: string[] = [];
    const io = (tty: boolean): CliIo => ({ out: () => undefined, err: (t) => void said.push(t), env: {}, errTTY: tty, columns: 100 });
    const total = 100 * 2 ** 20;
    for (const tty of [false, true]) {
      said.length = 0;
      const progress = cacheProgress(io(tty));
      for (const written of [4096, total / 2, total / 2, total, total, total]) progress({ file: "f", kind: "text", written, total });
      progress({ file: "f", kind: "mmproj", written: total, total });
      const text = said.join("");
      if (tty) {
        expect(text.match(/caching text/g)?.length).toBeGreaterThan(0);
        // one finished bar per file: each ends its line once
        expect(text.match(/100% /g)).toHaveLength(2);
        expect(text.match(/\n/g)).toHaveLength(2);
      } else {
        expect(said).toEqual([
          "ollama-compat: writing text 0.0 / 100.0 MiB (0%)\n",
          "ollama-compat: writing text 50.0 / 100.0 MiB (50%)\n",
          "ollama-compat: writing text 100.0 / 100.0 MiB (100%)\n",
          "ollama-compat: writing mmproj 100.0 / 100.0 MiB (100%)\n",
        ]);
      }
    }
  });
});

describe("serve beyond loopback without a key", () => {
  it("names the flags that lift the rule, not the API's fields, and refuses before translating", async () => {
    const cache = await temp();
    const r = await run(["serve", "gemma3:1b", "--models", await store(), "--cache-dir", cache, "--host", "0.0.0.0", "--llama-server", await refusingServer("")], { LLAMA_API_KEY: undefined });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/INSECURE_BIND: refusing to serve on 0\.0\.0\.0 without an API key \(--host 0\.0\.0\.0\)/);
    for (const flag of ["--api-key-file FILE", "LLAMA_API_KEY", "--insecure"]) expect(r.stderr).toContain(flag);
    // serve --all on an OLLAMA_HOST beyond loopback: the variable is named
    const all = await run(["serve", "--all", "--models", await store(), "--cache-dir", cache, "--llama-server", await refusingServer("")], { LLAMA_API_KEY: undefined, OLLAMA_HOST: "0.0.0.0:11434" });
    expect(all.code).toBe(1);
    expect(all.stderr.trim()).toMatch(/INSECURE_BIND: refusing to serve on 0\.0\.0\.0 without an API key \(OLLAMA_HOST=0\.0\.0\.0:11434\)/);
    expect(r.stderr).not.toContain("apiKey");
    expect(r.stderr).not.toMatch(/with insecure/);
    expect(await readdir(cache)).toEqual([]);
  });
});

describe("--cache-dir D and OLLAMA_COMPAT_CACHE=D are the same folder", () => {
  it("both keep translations in D/translated, and each command's --help says so", async () => {
    const root = await store();
    const server = await refusingServer("error: stand-in");
    const viaFlag = await temp();
    const viaEnv = await temp();
    await run(["serve", "gemma3:1b", "--no-mount", "--models", root, "--cache-dir", viaFlag, "--llama-server", server]);
    await run(["serve", "gemma3:1b", "--no-mount", "--models", root, "--llama-server", server], { OLLAMA_COMPAT_CACHE: viaEnv });
    for (const d of [viaFlag, viaEnv]) expect(await readdir(join(d, "translated", "entries"))).toHaveLength(1);
    // what one wrote, the other finds
    const ls = await run(["ls", "--models", root, "--cache-dir", viaEnv]);
    expect(ls.stdout).toMatch(/gemma3:1b .*cached$/m);
    for (const cmd of ["serve", "ls", "export"]) {
      const help = (await run([cmd, "--help"])).stdout;
      expect(help, cmd).toMatch(/--cache-dir <dir>\s+ollama-compat's cache folder, the same as\s+\$OLLAMA_COMPAT_CACHE/);
      expect(help, cmd).toMatch(/^ {2}OLLAMA_COMPAT_CACHE\s/m);
    }
  });
});
