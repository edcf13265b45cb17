/**
 * The README's `serve` examples, run as written: its `serve` and `curl` lines, and its
 * `openai` npm package program, against the real binary and llama-server. Only the port
 * (8080 in the README, a free one here) and where the store and cache are differ.
 */
import { execFile, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import OpenAI from "openai";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "@compat/server-bridge";
import { buildOllamaStore } from "@compat/store";
import { findLlamaTools, generateFixtureFiles } from "@compat/testkit";
import { spawnCli } from "./helpers";

const run = promisify(execFile);
/** A grammar of printable ASCII: what a random-weight model may write that every parser takes. */
const PRINTABLE = "root ::= [ -~]*";
const readme = fileURLToPath(new URL("../../../README.md", import.meta.url));
const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** The fenced blocks of the README's `serve` section, by language. */
async function serveSection(): Promise<{ sh: string; js: string }> {
  const text = await readFile(readme, "utf8");
  const start = text.indexOf("### `serve`: an OpenAI-compatible API");
  expect(start, "the README has its serve section").toBeGreaterThan(0);
  const section = text.slice(start, text.indexOf("\n### ", start + 1));
  const block = (lang: string) => {
    const m = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(section);
    expect(m, `a ${lang} block in the serve section`).not.toBeNull();
    return m![1]!;
  };
  return { sh: block("sh"), js: block("js") };
}

/** The folder of the installed `openai` package (what `npm install openai` gives a user). */
function openaiPackage(): string {
  const entry = createRequire(import.meta.url).resolve("openai");
  return entry.slice(0, entry.lastIndexOf(`${sep}openai${sep}`) + `${sep}openai`.length);
}

describe("the README's serve section, run as written (real llama-server)", () => {
  it("serve prints its URL; the curl line and the openai package program get an answer", async () => {
    const { sh, js } = await serveSection();
    const [serveLine, ...curlLines] = sh.trim().split("\n");
    expect(serveLine).toMatch(/^ollama-compat serve gemma3:4b --port 8080$/);
    const curl = curlLines.join("\n").replace(/\\\n\s*/g, "");
    expect(curl).toMatch(/^curl http:\/\/127\.0\.0\.1:8080\/v1\/chat\/completions /);

    const dir = await mkdtemp(join(tmpdir(), "compat-readme-serve-"));
    dirs.push(dir);
    const fixture = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }, dir);
    const store = join(dir, "store");
    // num_predict: the params layer's default answer length, so the examples (which set none) end soon
    await buildOllamaStore(store, [{ name: "gemma3:4b", model: fixture.text, params: { num_ctx: 1024, num_predict: 8 } }]);
    const port = String(await freePort());
    const tools = await findLlamaTools();
    const args = serveLine!.split(" ").slice(1).map((a) => (a === "8080" ? port : a));
    // --grammar: the default of every request that sets none. A random-weight model samples byte
    // tokens that are no UTF-8, and llama-server's chat parser (the GGUF template's peg-native
    // format) answers such an output with HTTP 500 "does not match the expected peg-native
    // format": 30 requests in 100 here, by the luck of a random seed, not by load. Printable
    // ASCII keeps the answer about the protocol; a real model writes text.
    const serve = spawnCli([...args, "--models", store, "--cache-dir", join(dir, "cache"), "--llama-server", tools.server, "--", "--threads", "2", "--no-warmup", "--grammar", PRINTABLE]);
    children.push(serve.child);
    const [url] = await serve.waitFor(/^http:\/\/127\.0\.0\.1:\d+$/m);
    expect(url).toBe(`http://127.0.0.1:${port}`);

    // the protocol, not the words: a chat completion that ended by itself or at num_predict
    const viaCurl = await run("sh", ["-c", curl.replaceAll("8080", port)]);
    const said = `curl's answer: ${viaCurl.stdout}${viaCurl.stderr}`;
    expect(() => JSON.parse(viaCurl.stdout), said).not.toThrow();
    expect(JSON.parse(viaCurl.stdout), said).toMatchObject({
      object: "chat.completion",
      model: "gemma3:4b",
      choices: [{ index: 0, finish_reason: expect.stringMatching(/^(stop|length)$/), message: { role: "assistant", content: expect.any(String) } }],
      usage: { completion_tokens: expect.any(Number) },
    });
    expect(JSON.parse(viaCurl.stdout).usage.completion_tokens, said).toBeLessThanOrEqual(8);

    // the program as a user saves it, next to an installed openai package
    const app = join(dir, "app");
    await mkdir(join(app, "node_modules"), { recursive: true });
    await symlink(openaiPackage(), join(app, "node_modules", "openai"));
    await writeFile(join(app, "client.mjs"), js.replaceAll("8080", port));
    const env: Record<string, string | undefined> = { ...process.env };
    delete env.LLAMA_API_KEY;
    delete env.OPENAI_API_KEY;
    const viaOpenai = await run(process.execPath, [join(app, "client.mjs")], { cwd: app, env }).catch((e: { stdout?: string; stderr?: string; message: string }) => e);
    expect(viaOpenai.stderr, `the program's output: ${viaOpenai.stdout ?? ""}${viaOpenai.stderr ?? ""}`).toBe("");
    expect(viaOpenai.stdout?.endsWith("\n"), `the program printed: ${JSON.stringify(viaOpenai.stdout)}`).toBe(true);

    // and the same client lists it under its Ollama name
    const models = await new OpenAI({ baseURL: `${url}/v1`, apiKey: "none" }).models.list();
    expect(models.data.map((m) => m.id)).toContain("gemma3:4b");
    serve.child.kill("SIGTERM");
    expect((await serve.closed).code).toBe(143);
    expect(dirname(openaiPackage())).toMatch(/node_modules$/);
  }, 300_000);
});
