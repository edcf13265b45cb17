import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { generateFixtureFiles, findLlamaTools } from "@compat/testkit";
import { freePort } from "@compat/server-bridge";
import { buildOllamaStore } from "@compat/store";
import { bin, collect, exited, runToEnd, tsx } from "./helpers";

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  for (const d of dirs) {
    for (const m of ["mnt", "bg"]) execFileSync("sh", ["-c", `fusermount3 -u -z ${join(d, m)} 2>/dev/null || true`]);
    await rm(d, { recursive: true, force: true });
  }
});

async function storeDir(): Promise<{ dir: string; store: string }> {
  const dir = await mkdtemp(join(tmpdir(), "compat-cli-mount-"));
  dirs.push(dir);
  const src = join(dir, "src");
  const gemma = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }, src);
  const llama = await generateFixtureFiles("llama", { seed: 1, layout: "ollama" }, src);
  const native = await generateFixtureFiles("llama", { seed: 2, layout: "native" }, src);
  const store = join(dir, "store");
  await buildOllamaStore(store, [
    { name: "gemma3:4b", model: gemma.text },
    { name: "llama3.2:1b", model: llama.text },
    { name: "tinyllama:native", model: native.text },
  ]);
  return { dir, store };
}

const cli = (args: string[], env: Record<string, string> = {}) => {
  const child = spawn(process.execPath, ["--import", tsx, bin, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  children.push(child);
  return child;
};

/** Waits until the child prints a line on stdout (the mount point, once mounted). */
async function mounted(child: ChildProcess): Promise<string> {
  const out = collect(child.stdout);
  const err = collect(child.stderr);
  for (let i = 0; i < 600 && !out().includes("\n"); i++) {
    if (child.exitCode !== null) throw new Error(`mount exited ${child.exitCode}: ${err()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return out().trim();
}

const inMountinfo = (point: string) => readFileSyncText("/proc/self/mountinfo").includes(` ${point} `);
function readFileSyncText(p: string): string {
  return execFileSync("cat", [p], { encoding: "utf8" });
}

describe("ollama-compat mount", () => {
  it("shows every installed model in the --models-dir layout; llama-server --models-dir serves them; SIGINT unmounts", async () => {
    const { dir, store } = await storeDir();
    const point = join(dir, "mnt");
    const child = cli(["mount", point, "--models", store]);
    const stderr = collect(child.stderr);
    expect(await mounted(child)).toBe(point);
    expect((await readdir(point)).sort()).toEqual(["gemma3-4b", "llama3.2-1b.gguf", "tinyllama-native.gguf"]);
    expect((await readdir(join(point, "gemma3-4b"))).sort()).toEqual(["gemma3-4b.gguf", "mmproj-gemma3-4b.gguf"]);
    expect(await readlink(join(point, "tinyllama-native.gguf"))).toMatch(/blobs\/sha256-[0-9a-f]{64}$/);
    expect(stderr()).toContain(`serve them with: llama-server --models-dir ${point}`);

    // stock llama-server's router, pointed at the mount
    const { server } = await findLlamaTools();
    const router = spawn(server, ["--models-dir", point, "--host", "127.0.0.1", "--port", "0", "--threads", "2", "--no-webui", "--offline"], { stdio: ["ignore", "pipe", "pipe"] });
    children.push(router);
    const log = collect(router.stderr);
    let url = "";
    for (let i = 0; i < 600 && !url; i++) {
      url = /listening on (http:\/\/[\d.]+:\d+)/.exec(log())?.[1] ?? "";
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(url, log()).not.toBe("");
    for (const model of ["gemma3-4b", "llama3.2-1b", "tinyllama-native"]) await chatOk(url, model);
    router.kill("SIGTERM");
    await exited(router);

    child.kill("SIGINT");
    expect((await exited(child)).code).toBe(0);
    expect(stderr()).toContain(`unmounted ${point}`);
    expect(inMountinfo(point)).toBe(false);
  });

  it("--layout lmstudio: publisher/model/file.gguf", async () => {
    const { dir, store } = await storeDir();
    const point = join(dir, "mnt");
    const child = cli(["mount", point, "--models", store, "--layout", "lmstudio"]);
    await mounted(child);
    expect((await readdir(join(point, "library"))).sort()).toEqual(["gemma3-4b", "llama3.2-1b", "tinyllama-native"]);
    expect((await readdir(join(point, "library/gemma3-4b"))).sort()).toEqual(["gemma3-4b.gguf", "mmproj-gemma3-4b.gguf"]);
    child.kill("SIGTERM");
    expect((await exited(child)).code).toBe(0);
  });

  it("--daemon: returns once mounted, the pid file names it, kill unmounts and removes the pid file", async () => {
    const { dir, store } = await storeDir();
    const point = join(dir, "bg");
    const run = await runToEnd(cli(["mount", point, "--models", store, "--daemon"]));
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.trim()).toBe(point);
    const pid = Number((await readFile(`${point}.pid`, "utf8")).trim());
    expect((await readdir(point)).length).toBe(3);
    process.kill(pid, "SIGTERM");
    for (let i = 0; i < 100 && existsSync(`${point}.pid`); i++) await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(`${point}.pid`)).toBe(false);
    expect(inMountinfo(point)).toBe(false);
    expect(await readFile(`${point}.log`, "utf8")).toContain(`unmounted ${point}`);
  });

  it("after the daemon and its controller are killed with SIGKILL, the next mount recovers the mount point", async () => {
    const { dir, store } = await storeDir();
    const point = join(dir, "mnt");
    const first = cli(["mount", point, "--models", store]);
    await mounted(first);
    const daemon = Number(execFileSync("pgrep", ["-P", String(first.pid), "-f", "ollama-compat-mountd"], { encoding: "utf8" }).trim());
    // stopped first, so that it cannot see the daemon die and clean up after it
    process.kill(first.pid!, "SIGSTOP");
    process.kill(daemon, "SIGKILL");
    process.kill(first.pid!, "SIGKILL");
    await exited(first);
    expect(inMountinfo(point)).toBe(true);
    await expect(readdir(point)).rejects.toMatchObject({ code: "ENOTCONN" }); // stale
    const again = cli(["mount", point, "--models", store]);
    expect(await mounted(again)).toBe(point);
    expect((await readdir(point)).length).toBe(3);
    again.kill("SIGINT");
    expect((await exited(again)).code).toBe(0);
  });

  it("SIGTERM while a store of 2,000 models is being mounted stops at once: exit 0, unmounted, not every model mounted", async () => {
    const { dir, store } = await storeDir();
    // 2,000 tags of the native model: each is a manifest to read and a file to mount
    const manifest = await readFile(join(store, "manifests/registry.ollama.ai/library/tinyllama/native"));
    for (let i = 0; i < 2000; i++) {
      const d = join(store, "manifests/registry.ollama.ai/library", `many${i}`);
      await mkdir(d, { recursive: true });
      await writeFile(join(d, "latest"), manifest);
    }
    const point = join(dir, "mnt");
    const child = cli(["mount", point, "--models", store]);
    const stderr = collect(child.stderr);
    const stdout = collect(child.stdout);
    const shown = () => stderr().split("\n").filter((l) => l.includes(" -> ")).length;
    for (let i = 0; i < 6000 && shown() === 0 && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
    expect(shown(), stderr()).toBeGreaterThan(0);
    child.kill("SIGTERM");
    expect((await exited(child)).code, stderr()).toBe(0);
    expect(stderr()).toContain(`SIGTERM: stopped before every model was mounted, unmounted ${point}`);
    expect(shown()).toBeLessThan(2003);
    expect(stdout()).toBe("");
    expect(inMountinfo(point)).toBe(false);
  }, 600_000);

  it("says why, in one line, when FUSE cannot be used", async () => {
    const { dir, store } = await storeDir();
    const run = await runToEnd(cli(["mount", join(dir, "mnt"), "--models", store], { OLLAMA_COMPAT_MOUNTD: join(dir, "no-such-daemon") }));
    expect(run.code).toBe(1);
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    expect(run.stderr).toMatch(/mount .*no-such-daemon is not executable.*ollama-compat export/);
  });
});

describe("ollama-compat serve on a mount of its own", () => {
  /** serve's URL once it is ready: --all prints the URL as its API answers, and says "ready" once the router is. */
  async function serveUntilReady(args: string[], env: Record<string, string> = {}) {
    const child = cli(args, env);
    const err = collect(child.stderr);
    const url = await mounted(child);
    for (let i = 0; i < 1200 && !/^ollama-compat: (Ollama API ready on|llama-server \(pid \d+\) ready)/m.test(err()); i++) {
      if (child.exitCode !== null) throw new Error(`serve exited ${child.exitCode}: ${err()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return { child, err, url };
  }

  it("serve --all whose mount daemon is killed (SIGKILL): says so in one line, mounts the store again, and serves a model not loaded before", async () => {
    const { dir, store } = await storeDir();
    const { server } = await findLlamaTools();
    const all = await serveUntilReady(["serve", "--all", "--models", store, "--cache-dir", join(dir, "cache"), "--llama-server", server, "--", "--threads", "2", "--no-warmup"], { OLLAMA_HOST: `127.0.0.1:${await freePort()}` });
    await chatOk(all.url, "gemma3:4b");
    const daemon = Number(execFileSync("pgrep", ["-P", String(all.child.pid), "-f", "ollama-compat-mountd"], { encoding: "utf8" }).trim());
    process.kill(daemon, "SIGKILL");
    const again = /ollama-compat: mount: the mount daemon stopped \(SIGKILL\); mounted the store again at .+, 3 models\n/;
    for (let i = 0; i < 1200 && !again.test(all.err()) && all.child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    expect(all.err()).toMatch(again);
    // a model never loaded: llama-server reads it from the new daemon, at the same path
    await chatOk(all.url, "llama3.2:1b");
    all.child.kill("SIGTERM");
    expect((await exited(all.child)).code).toBe(143);
  }, 240_000);

  it("serve MODEL and serve --all read from a mount (nothing written to the cache); --no-mount uses the cache", async () => {
    const { dir, store } = await storeDir();
    const { server } = await findLlamaTools();
    const cache = join(dir, "cache");
    const one = await serveUntilReady(["serve", "gemma3:4b", "--models", store, "--cache-dir", cache, "--llama-server", server, "--", "--threads", "2", "--no-warmup"]);
    expect(one.err()).toMatch(/serving from a mount of the store \((.+)\): nothing is translated up front/);
    await chatOk(one.url, "gemma3:4b");
    const mountDir = /serving from a mount of the store \((.+)\)/.exec(one.err())![1]!;
    expect(inMountinfo(mountDir)).toBe(true);
    one.child.kill("SIGINT");
    await exited(one.child);
    expect(inMountinfo(mountDir)).toBe(false); // unmounted with llama-server
    expect(existsSync(join(cache, "translated", "entries"))).toBe(false);

    // serve --all answers on Ollama's address: a free one, not 11434
    const all = await serveUntilReady(["serve", "--all", "--models", store, "--cache-dir", cache, "--llama-server", server, "--", "--threads", "2", "--no-warmup"], { OLLAMA_HOST: `127.0.0.1:${await freePort()}` });
    for (const m of ["gemma3:4b", "llama3.2:1b", "tinyllama:native"]) await chatOk(all.url, m);
    all.child.kill("SIGTERM");
    await exited(all.child);
    expect(existsSync(join(cache, "translated", "entries"))).toBe(false);

    const cached = await serveUntilReady(["serve", "llama3.2:1b", "--no-mount", "--models", store, "--cache-dir", cache, "--llama-server", server, "--", "--threads", "2", "--no-warmup"]);
    expect(cached.err()).not.toMatch(/serving from a mount|not mounting/);
    expect(cached.err()).toMatch(/translated llama3.2:1b -> /);
    cached.child.kill("SIGINT");
    await exited(cached.child);
    expect((await readdir(join(cache, "translated", "entries"))).length).toBe(1);
  }, 240_000);

  it("serve --all started again over the same cache plans nothing up front (each model's facts are recorded); the first requests wait for their models' plans and real llama-server answers", async () => {
    const { dir, store } = await storeDir();
    const { server } = await findLlamaTools();
    const cache = join(dir, "cache");
    const args = ["serve", "--all", "--models", store, "--cache-dir", cache, "--llama-server", server, "--", "--threads", "2", "--no-warmup"];
    const first = await serveUntilReady(args, { OLLAMA_HOST: `127.0.0.1:${await freePort()}` });
    const show = async (url: string) => {
      const r = await fetch(`${url}/api/show`, { method: "POST", body: JSON.stringify({ model: "gemma3:4b" }) });
      expect(r.status).toBe(200);
      const body = (await r.json()) as { capabilities: string[]; template: string };
      return { capabilities: body.capabilities, template: body.template };
    };
    const before = await show(first.url);
    first.child.kill("SIGTERM");
    await exited(first.child);
    // one record per model: the native one too
    expect((await readdir(join(cache, "model-facts"))).filter((f) => f.endsWith(".json")).length).toBe(3);

    const again = await serveUntilReady(args, { OLLAMA_HOST: `127.0.0.1:${await freePort()}` });
    const mountDir = /serving from a mount of the store \((.+)\)/.exec(again.err())![1]!;
    // shown from the records: nothing planned yet, so the translated files are not in the mount
    expect(await readdir(mountDir)).toEqual([]);
    // /api/show waits for the plan: the served chat template and capabilities as on the first start
    expect(await show(again.url)).toEqual(before);
    for (const m of ["gemma3:4b", "llama3.2:1b", "tinyllama:native"]) await chatOk(again.url, m);
    again.child.kill("SIGTERM");
    await exited(again.child);

    // serve MODEL from the records: llama-server starts once the model's files are planned
    const one = await serveUntilReady(["serve", "gemma3:4b", ...args.slice(2)]);
    await chatOk(one.url, "gemma3:4b");
    one.child.kill("SIGINT");
    await exited(one.child);
  }, 300_000);

  it("falls back to the cache, with the reason in one line, where FUSE cannot be used", async () => {
    const { dir, store } = await storeDir();
    const { server } = await findLlamaTools();
    const s = await serveUntilReady(["serve", "llama3.2:1b", "--models", store, "--cache-dir", join(dir, "cache"), "--llama-server", server, "--", "--threads", "2", "--no-warmup"], {
      OLLAMA_COMPAT_MOUNTD: join(dir, "no-such-daemon"),
    });
    expect(s.err()).toMatch(/^ollama-compat: not mounting \(.*no-such-daemon is not executable\); serving from the translation cache$/m);
    await chatOk(s.url, "llama3.2:1b");
    s.child.kill("SIGINT");
    await exited(s.child);
  });
});

/** A short chat answer through llama-server's OpenAI route (printable text: random weights). */
async function chatOk(url: string, model: string): Promise<void> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 3, temperature: 0, grammar: "root ::= [ -~]*" }),
    signal: AbortSignal.timeout(120_000),
  });
  expect(r.status, `${model}: ${await r.clone().text()}`).toBe(200);
}
