/**
 * `export` as its users run it: the binary (from source) on a store built by the testkit, and
 * the exported folder served by the real llama-server: through its router with the exported
 * `--models-preset`, and each llama-swap entry's command line as llama-swap runs it. Then the
 * ways it must not hurt a folder it does not own, and what an interrupted copy leaves.
 */
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync, readlinkSync, realpathSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, LlamaChild, waitHealthy } from "@compat/server-bridge";
import { buildOllamaStore } from "@compat/store";
import { findLlamaTools, generateFixture, generateFixtureFiles, writeWithZeroTail } from "@compat/testkit";
import { httpGet, spawnCli } from "./helpers";

let dir: string;
let store: string;
let cache: string;
let server: string;
const children: LlamaChild[] = [];

async function cli(args: string[], env: Record<string, string | undefined> = {}) {
  const s = spawnCli(args, env);
  const { code, signal } = await s.closed;
  return { code, signal, ...s.out };
}

/** Same store and cache for every test: translations are made once. */
const common = () => ["--models", store, "--cache-dir", cache];

const STOPS = ["<|eot_id|>", "User:"];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "compat-cli-export-"));
  const fx = join(dir, "fixtures");
  const vision = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }, fx);
  const llama3 = await generateFixtureFiles("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" }, fx);
  const embed = await generateFixtureFiles("embeddinggemma", { seed: 2, layout: "ollama", variant: "300m" }, fx);
  const native = await generateFixtureFiles("llama", { seed: 3, layout: "native" }, fx);
  store = join(dir, "store");
  cache = join(dir, "cache");
  await buildOllamaStore(store, [
    { name: "gemma3:4b", model: vision.text, params: { num_ctx: 1024 } },
    { name: "llama3.2:1b", model: llama3.text, params: { num_ctx: 2048, temperature: 0.25, stop: STOPS } },
    { name: "embeddinggemma:300m", model: embed.text },
    { name: "tiny-llama:native", model: native.text },
  ]);
  server = (await findLlamaTools()).server;
}, 600_000);
afterAll(async () => {
  for (const c of children) await c.stop(0);
  await rm(dir, { recursive: true, force: true });
});

async function post(url: string, path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(240_000) });
  return { status: r.status, json: (await r.json().catch(() => ({}))) as Record<string, unknown> };
}

const chatBody = (model: string) => ({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 3, temperature: 0, grammar: "root ::= [ -~]*" });

interface Props {
  default_generation_settings: { n_ctx: number; params: { temperature: number } };
  model_path: string;
}

/** The sampling defaults a request that names none gets (llama-server's /completion reports them; /props leaves the stop words out). */
async function defaults(url: string, model: string): Promise<{ temperature: number; stop: string[] }> {
  const r = await post(url, "/completion", { model, prompt: "hello", n_predict: 1 });
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return r.json.generation_settings as { temperature: number; stop: string[] };
}

describe("export --layout models-dir: llama-server --models-preset serves each model as serve does", () => {
  it("models.ini beside the models, under the Ollama names: chat, vision, embeddings (not 501), context, temperature and the stop word applied", async () => {
    const to = join(dir, "models-dir");
    const r = await cli(["export", "--to", to, ...common()]);
    expect(r.code, r.stderr).toBe(0);
    const preset = join(to, "models.ini");
    expect(r.stdout).toContain(`serve them with: llama-server --models-preset ${preset}\n`);
    // llama-server --models-dir's layout, as before
    expect((await readdir(join(to, "gemma3-4b"))).sort()).toEqual(["gemma3-4b.gguf", "mmproj-gemma3-4b.gguf"]);
    for (const f of ["gemma3-4b/gemma3-4b.gguf", "gemma3-4b/mmproj-gemma3-4b.gguf", "llama3.2-1b.gguf", "embeddinggemma-300m.gguf"]) {
      expect(lstatSync(join(to, f)).isSymbolicLink(), f).toBe(true);
      expect(realpathSync(join(to, f)).startsWith(realpathSync(cache)), f).toBe(true);
    }
    expect(readlinkSync(join(to, "tiny-llama-native.gguf"))).toMatch(/blobs\/sha256-[0-9a-f]{64}$/);
    // a preset holds one value per flag: the second stop word is named as left out
    expect(r.stderr).toMatch(/warning: llama3\.2:1b: a preset holds one --reverse-prompt; keeping "<\|eot_id\|>" \(--layout llama-swap keeps every stop word\)/);

    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    // router-wide arguments only (they would override the preset's): no context size here
    const router = new LlamaChild({ command: server, args: ["--models-preset", preset, "--port", String(port), "--no-webui", "--offline", "--models-max", "1", "--threads", "2", "--no-warmup"] });
    children.push(router);
    try {
      await waitHealthy(router, url, 120_000);
      const listed = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string; aliases?: string[] }> };
      const names = listed.data.flatMap((m) => [m.id, ...(m.aliases ?? [])]);
      for (const n of ["gemma3:4b", "llama3.2:1b", "embeddinggemma:300m", "tiny-llama:native"]) expect(names, n).toContain(n);

      for (const model of ["llama3.2:1b", "gemma3:4b", "tiny-llama:native"]) {
        const c = await post(url, "/v1/chat/completions", chatBody(model));
        expect(c.status, `${model}: ${JSON.stringify(c.json)}`).toBe(200);
      }
      const image = `data:image/ppm;base64,${Buffer.concat([Buffer.from("P6\n16 16\n255\n"), Buffer.alloc(768, 128)]).toString("base64")}`;
      const seen = await post(url, "/v1/chat/completions", { ...chatBody("gemma3:4b"), messages: [{ role: "user", content: [{ type: "text", text: "what is it?" }, { type: "image_url", image_url: { url: image } }] }] });
      expect(seen.status, JSON.stringify(seen.json)).toBe(200);
      const emb = await post(url, "/v1/embeddings", { model: "embeddinggemma:300m", input: "hello world" });
      expect(emb.status, JSON.stringify(emb.json)).toBe(200);
      expect((emb.json.data as Array<{ embedding: number[] }>)[0]!.embedding.length).toBeGreaterThan(0);

      const sampling = await defaults(url, "llama3.2:1b");
      expect(sampling.temperature).toBeCloseTo(0.25, 5);
      expect(sampling.stop).toEqual([STOPS[0]]);
      const props = JSON.parse((await httpGet(`${url}/props?model=${encodeURIComponent("llama3.2:1b")}`)).body) as Props;
      expect(props.default_generation_settings.n_ctx).toBe(2048);
      expect(props.default_generation_settings.params.temperature).toBeCloseTo(0.25, 5);
      expect(props.model_path).toBe(join(to, "llama3.2-1b.gguf"));
    } finally {
      await router.stop();
    }
  }, 600_000);
});

/**
 * What llama-swap does with an entry's `cmd` (internal/config: SanitizeCommand, macros): lines
 * starting with # dropped, `${PORT}` replaced, then split as a POSIX shell splits words (here
 * by sh itself, with no expansion: every word export writes that is not plain is quoted).
 */
function llamaSwapArgv(cmd: string, port: number): string[] {
  const text = cmd
    .split("\n")
    .filter((l) => !l.trim().startsWith("#"))
    .join("\n")
    .replaceAll("${PORT}", String(port));
  const out = execFileSync("sh", ["-c", `set -f; for a in ${text.replace(/\n/g, " ")}; do printf '%s\\0' "$a"; done`]);
  return out.toString("utf8").split("\0").slice(0, -1);
}

describe("export --layout llama-swap: one entry per model, llama-server's command line as serve builds it", () => {
  it("each entry's command, run as llama-swap runs it, serves its model with every stop word", async () => {
    const to = join(dir, "llama-swap");
    const r = await cli(["export", "--to", to, "--layout", "llama-swap", "--llama-server", server, ...common()]);
    expect(r.code, r.stderr).toBe(0);
    const config = join(to, "llama-swap.yaml");
    expect(r.stdout).toContain(`serve them with: llama-swap --config ${config}\n`);
    expect(r.stderr).not.toMatch(/warning/);
    const yaml = parseYaml(await readFile(config, "utf8")) as { models: Record<string, { cmd: string; proxy: string; checkEndpoint: string }> };
    // model IDs as Ollama users type them
    expect(Object.keys(yaml.models).sort()).toEqual(["embeddinggemma:300m", "gemma3:4b", "llama3.2:1b", "tiny-llama:native"]);

    for (const [id, entry] of Object.entries(yaml.models)) {
      expect(entry.proxy).toBe("http://127.0.0.1:${PORT}");
      expect(entry.checkEndpoint).toBe("/health");
      const port = await freePort();
      const [command, ...args] = llamaSwapArgv(entry.cmd, port);
      expect(command).toBe(server);
      const child = new LlamaChild({ command: command!, args: [...args, "--threads", "2", "--no-warmup"] });
      children.push(child);
      const url = entry.proxy.replace("${PORT}", String(port));
      try {
        await waitHealthy(child, url, 120_000);
        if (id === "embeddinggemma:300m") {
          const emb = await post(url, "/v1/embeddings", { model: id, input: "hello" });
          expect(emb.status, JSON.stringify(emb.json)).toBe(200);
          continue;
        }
        const c = await post(url, "/v1/chat/completions", chatBody(id));
        expect(c.status, `${id}: ${JSON.stringify(c.json)}`).toBe(200);
        const props = JSON.parse((await httpGet(`${url}/props`)).body) as Props & { model_alias: string };
        expect(props.model_alias).toBe(id);
        if (id === "llama3.2:1b") {
          expect(props.default_generation_settings.n_ctx).toBe(2048);
          const sampling = await defaults(url, id);
          expect(sampling.temperature).toBeCloseTo(0.25, 5);
          expect(sampling.stop).toEqual(STOPS);
        }
        if (id === "gemma3:4b") expect(args).toContain("--mmproj");
      } finally {
        await child.stop();
      }
    }
  }, 600_000);
});

describe("export --layout lmstudio --copy", () => {
  it("publisher/model/file.gguf; translated files are byte copies of the cache's, native ones still links", async () => {
    const to = join(dir, "lmstudio");
    const r = await cli(["export", "gemma3:4b", "tiny-llama:native", "--to", to, "--layout", "lmstudio", "--copy", "--json", ...common()]);
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout) as { models: Array<{ model: { path: string; source: string }; mmproj?: { path: string; source: string } }>; command?: string };
    expect(j.models.map((m) => m.model.path.slice(to.length + 1))).toEqual(["library/gemma3-4b/gemma3-4b.gguf", "library/tiny-llama-native/tiny-llama-native.gguf"]);
    expect(j.command).toBeUndefined();
    const [gemma] = j.models;
    for (const f of [gemma!.model, gemma!.mmproj!]) {
      expect(lstatSync(f.path).isFile()).toBe(true);
      expect(readFileSync(f.path).equals(readFileSync(f.source)), f.path).toBe(true);
    }
    expect(lstatSync(join(to, "library/tiny-llama-native/tiny-llama-native.gguf")).isSymbolicLink()).toBe(true);
    // no temp file is left beside the copies
    expect((await readdir(join(to, "library/gemma3-4b"))).sort()).toEqual(["gemma3-4b.gguf", "mmproj-gemma3-4b.gguf"]);
  }, 300_000);
});

describe("export never hurts what it did not make", () => {
  it("a user's file where a model goes: refused, naming the path and --force; the other models are exported; --force replaces it", async () => {
    const to = join(dir, "user-file");
    await mkdir(to, { recursive: true });
    const mine = join(to, "llama3.2-1b.gguf");
    await writeFile(mine, "my notes\n");
    const r = await cli(["export", "llama3.2:1b", "tiny-llama:native", "--to", to, ...common()]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`ollama-compat: llama3.2:1b: ${mine}: a file export did not make is already there; move it away or pass --force to replace it`);
    expect(await readFile(mine, "utf8")).toBe("my notes\n");
    expect(lstatSync(join(to, "tiny-llama-native.gguf")).isSymbolicLink()).toBe(true);
    // run again: what it made itself it replaces without asking; the user's file still stands
    const again = await cli(["export", "llama3.2:1b", "tiny-llama:native", "--to", to, ...common()]);
    expect(again.code).toBe(1);
    expect(again.stderr).not.toMatch(/tiny-llama:native:/);
    expect(await readFile(mine, "utf8")).toBe("my notes\n");
    const forced = await cli(["export", "llama3.2:1b", "--to", to, "--force", ...common()]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(lstatSync(mine).isSymbolicLink()).toBe(true);
  }, 300_000);

  it("a models.ini export did not write: refused before any work; --force replaces it", async () => {
    const to = join(dir, "user-preset");
    await mkdir(to, { recursive: true });
    await writeFile(join(to, "models.ini"), "[mine]\nmodel = /x.gguf\n");
    const r = await cli(["export", "tiny-llama:native", "--to", to, ...common()]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/models\.ini: a file export did not make is already there; move it away or pass --force/);
    expect(existsSync(join(to, "tiny-llama-native.gguf"))).toBe(false);
    expect(await readFile(join(to, "models.ini"), "utf8")).toBe("[mine]\nmodel = /x.gguf\n");
    const forced = await cli(["export", "tiny-llama:native", "--to", to, "--force", ...common()]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(await readFile(join(to, "models.ini"), "utf8")).toMatch(/^\[tiny-llama/m);
  }, 300_000);

  it("links planted in the folder are never written through: at the old temp name, at the target, where the model folder goes", async () => {
    const to = join(dir, "planted");
    const outside = join(dir, "outside");
    await mkdir(join(outside, "folder"), { recursive: true });
    await mkdir(to, { recursive: true });
    const victim = join(outside, "victim");
    await writeFile(victim, "precious\n");
    // the hidden name earlier versions copied into, and the target itself
    await symlink(victim, join(to, ".llama3.2-1b.gguf.partial"));
    await symlink(victim, join(to, "llama3.2-1b.gguf"));
    // where gemma3:4b's folder goes: a link to a folder outside
    await symlink(join(outside, "folder"), join(to, "gemma3-4b"));
    const r = await cli(["export", "llama3.2:1b", "gemma3:4b", "--to", to, "--copy", ...common()]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/llama3\.2-1b\.gguf: a link export did not make is already there; move it away or pass --force/);
    expect(r.stderr).toMatch(/gemma3-4b: a link is where the model's folder goes; move it away or pass --force/);
    expect(r.stderr).not.toMatch(/EEXIST|ENOTDIR/);
    const forced = await cli(["export", "llama3.2:1b", "gemma3:4b", "--to", to, "--copy", "--force", ...common()]);
    expect(forced.code, forced.stderr).toBe(0);
    // the links were replaced, never followed
    expect(await readFile(victim, "utf8")).toBe("precious\n");
    expect(await readdir(join(outside, "folder"))).toEqual([]);
    expect(lstatSync(join(to, "llama3.2-1b.gguf")).isFile()).toBe(true);
    expect(lstatSync(join(to, "gemma3-4b")).isDirectory()).toBe(true);
    expect(existsSync(join(to, ".llama3.2-1b.gguf.partial"))).toBe(false);
  }, 300_000);

  it("a user's file where the model folder goes is one clear line, not EEXIST; when every model fails there is no 'serve them with'", async () => {
    const to = join(dir, "file-for-folder");
    await mkdir(to, { recursive: true });
    await writeFile(join(to, "gemma3-4b"), "mine\n");
    const r = await cli(["export", "gemma3:4b", "--to", to, ...common()]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`ollama-compat: gemma3:4b: ${join(to, "gemma3-4b")}: a file is where the model's folder goes; move it away or pass --force to replace it`);
    expect(r.stderr).not.toMatch(/EEXIST/);
    expect(r.stdout).not.toMatch(/serve them with/);
    expect(existsSync(join(to, "models.ini"))).toBe(false);
    const none = await cli(["export", "nope:1", "--to", to, ...common()]);
    expect(none.code).toBe(1);
    expect(none.stdout).not.toMatch(/serve them with/);
    // --to under a file: the flag, the path and why, in words
    const under = await cli(["export", "tiny-llama:native", "--to", join(to, "gemma3-4b", "sub"), ...common()]);
    expect(under.code).toBe(1);
    expect(under.stderr.trim()).toBe(`ollama-compat: --to ${join(to, "gemma3-4b", "sub")}: cannot make the folder: a part of the path is a file, not a folder`);
  }, 300_000);
});

describe("an interrupted export --copy", () => {
  let bigStore: string;
  beforeAll(async () => {
    bigStore = join(dir, "big-store");
    const big = join(dir, "big.gguf");
    await writeWithZeroTail(generateFixture("gemma3", { seed: 3, layout: "ollama", variant: "1b" }).text, big, 512 * 2 ** 20);
    await buildOllamaStore(bigStore, [{ name: "big:1", model: big }]);
    // translated once, so the export below only copies
    expect((await cli(["export", "big:1", "--to", join(dir, "big-warm"), "--models", bigStore, "--cache-dir", cache])).code).toBe(0);
  }, 600_000);

  /** The copy's temp file, once the writer has made it (mid-copy: the copy takes a while). */
  async function untilTempFile(to: string, s: ReturnType<typeof spawnCli>): Promise<string> {
    const deadline = Date.now() + 120_000;
    for (;;) {
      const temp = (await readdir(to).catch(() => [] as string[])).find((e) => e.startsWith(".big-1.gguf.") && e.endsWith(".tmp"));
      if (temp) return temp;
      if (s.child.exitCode !== null || Date.now() > deadline) throw new Error(`no temp file appeared; stderr: ${s.out.stderr}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    it(`${signal} mid-copy leaves neither the copy nor its temp file`, async () => {
      const to = join(dir, `big-${signal}`);
      const s = spawnCli(["export", "big:1", "--to", to, "--copy", "--models", bigStore, "--cache-dir", cache]);
      await untilTempFile(to, s);
      s.child.kill(signal);
      const { code } = await s.closed;
      expect(code).toBe(signal === "SIGINT" ? 130 : 143);
      expect((await readdir(to)).filter((e) => e !== ".ollama-compat-export.json")).toEqual([]);
    }, 300_000);
  }

  it("SIGKILL mid-copy leaves a temp file; the next export into the folder removes it", async () => {
    const to = join(dir, "big-SIGKILL");
    const s = spawnCli(["export", "big:1", "--to", to, "--copy", "--models", bigStore, "--cache-dir", cache]);
    const temp = await untilTempFile(to, s);
    s.child.kill("SIGKILL");
    await s.closed;
    expect(await readdir(to)).toContain(temp);
    const next = await cli(["export", "tiny-llama:native", "--to", to, ...common()]);
    expect(next.code, next.stderr).toBe(0);
    expect((await readdir(to)).filter((e) => e.endsWith(".tmp") || e.endsWith(".partial"))).toEqual([]);
  }, 300_000);
});
