/**
 * A served name whose files change (/api/copy onto it, /api/create over it, /api/pull of a newer
 * version from a real registry) while a request is
 * streaming from its instance, on serveOllama with real llama-server, driven by the official
 * `ollama` client. The instance is held mid-request with SIGSTOP once the request has reached
 * it (its bytes wait in the instance's socket), so the change always lands while the request
 * runs, whatever the machine's speed; SIGCONT lets it go on. Expected, as Ollama's scheduler
 * does it: the running request streams to its end from the old files, the next request for the
 * name is answered by the new ones, and nothing waits for ever.
 */
import { readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ollama, type ChatResponse, type GenerateResponse } from "ollama";
import type { OllamaServer } from "@compat/ollama-api";
import { generateFixtureFiles, startOciRegistry, type OciRegistry } from "@compat/testkit";
import { tempDirs } from "./helpers";
import { serveTwoLlamas } from "./ollama-helpers";

const temp = tempDirs();
let server: OllamaServer;
let ollama: Ollama;
let registry: OciRegistry;
/** Instances this file stopped, continued in afterAll if a test failed before it did. */
const stopped = new Set<number>();

beforeAll(async () => {
  registry = await startOciRegistry();
  server = await serveTwoLlamas(temp, ["alpha", "beta"]);
  ollama = new Ollama({ host: server.url });
}, 300_000);
afterAll(async () => {
  for (const pid of [...stopped]) resume(pid);
  await server?.stop();
  await registry?.stop();
});

interface RouterEntry {
  name: string;
  status: string;
  args: string[];
}

/** The router's models by Ollama name (a variant under its router name), with their status and llama-server arguments. */
async function routerModels(): Promise<Map<string, RouterEntry>> {
  const r = await fetch(`${server.router.url}/models`, { headers: { authorization: `Bearer ${server.routerKey}` } });
  const body = (await r.json()) as { data: Array<{ id: string; aliases?: string[]; status: { value: string; args?: string[] } }> };
  return new Map(body.data.map((m) => [m.aliases?.[0] ?? m.id, { name: m.aliases?.[0] ?? m.id, status: m.status.value, args: m.status.args ?? [] }]));
}

const argOf = (args: readonly string[], flag: string): string | undefined => {
  const i = args.indexOf(flag);
  return i < 0 ? undefined : args[i + 1];
};

/** The model instance the router runs for `routerName`: its process and port (its command line has them). */
async function instanceOf(routerName: string): Promise<{ pid: number; port: number }> {
  const entry = (await routerModels()).get(routerName);
  expect(entry?.status, `${routerName} should be loaded`).toBe("loaded");
  const port = Number(argOf(entry!.args, "--port"));
  for (const d of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      // the field after the command's parenthesised name: state, then the parent's pid
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid !== server.router.pid) continue;
      const argv = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
      if (argOf(argv, "--port") === String(port)) return { pid: Number(d), port };
    } catch {
      // a process that went meanwhile
    }
  }
  throw new Error(`no child of the router (pid ${server.router.pid}) listens on port ${port}`);
}

/** Whether request bytes wait, unread, in a connection to `port` on loopback (the kernel's table of TCP sockets). */
function requestWaiting(port: number): boolean {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  return readFileSync("/proc/net/tcp", "utf8")
    .split("\n")
    .slice(1)
    .some((line) => {
      const f = line.trim().split(/\s+/);
      // local address, remote address, state (01: established), tx_queue:rx_queue
      return f[1]?.endsWith(hex) === true && f[3] === "01" && parseInt(f[4]!.split(":")[1]!, 16) > 0;
    });
}

async function until(what: string, probe: () => boolean | Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Runs `change` while a request streams from `routerName`'s instance: the instance is stopped,
 * `start` sends the request, and once its bytes have reached the instance `change` runs; then
 * the instance goes on. Resolves with what `start` gave and what `change` gave.
 */
async function whileStreaming<S, C>(routerName: string, start: () => Promise<S>, change: () => Promise<C>): Promise<[S, C]> {
  const { pid, port } = await instanceOf(routerName);
  process.kill(pid, "SIGSTOP");
  stopped.add(pid);
  try {
    const streaming = start();
    streaming.catch(() => undefined); // awaited below
    await until(`the request to reach ${routerName}'s instance`, () => requestWaiting(port));
    const changed = await change();
    resume(pid);
    return [await streaming, changed];
  } finally {
    resume(pid);
  }
}

/** Lets a stopped instance go on (one the router killed meanwhile is gone: the stream says what that did). */
function resume(pid: number): void {
  if (!stopped.delete(pid)) return;
  try {
    process.kill(pid, "SIGCONT");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e;
  }
}

/** Every piece of a streamed answer, read to its end (the client throws on a line that is not JSON, and on an `{"error"}` line). */
async function pieces<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const p of stream) out.push(p);
  return out;
}

/** What a finished stream must look like: pieces of printable text, then one done:true with the counts. */
function expectComplete(parts: Array<ChatResponse | GenerateResponse>, numPredict: number): void {
  expect(parts.length).toBeGreaterThan(1);
  const last = parts.at(-1)!;
  expect(last.done).toBe(true);
  expect(parts.slice(0, -1).every((p) => !p.done)).toBe(true);
  expect(last.eval_count).toBeGreaterThan(0);
  expect(last.eval_count).toBeLessThanOrEqual(numPredict);
  const text = parts.map((p) => ("message" in p ? p.message.content : p.response)).join("");
  expect(text).toMatch(/^[ -~]*$/);
}

describe("the files behind a served name change while a request streams from it", () => {
  it("/api/copy onto it: the /api/chat stream ends normally from the old model; the next request loads the new one", { timeout: 300_000 }, async () => {
    await ollama.chat({ model: "alpha", messages: [{ role: "user", content: "hi" }], options: { num_predict: 1 } });
    const before = await routerModels();
    const betaModel = argOf(before.get("beta:latest")!.args, "--model")!;
    expect(argOf(before.get("alpha:latest")!.args, "--model")).not.toBe(betaModel);

    const [stream] = await whileStreaming(
      "alpha:latest",
      async () => pieces(await ollama.chat({ model: "alpha", messages: [{ role: "user", content: "tell me a story" }], stream: true, options: { num_predict: 24, temperature: 0 } })),
      () => ollama.copy({ source: "beta", destination: "alpha" }),
    );
    expectComplete(stream, 24);

    const next = await ollama.chat({ model: "alpha", messages: [{ role: "user", content: "hi" }], options: { num_predict: 2, temperature: 0 } });
    expect(next.done).toBe(true);
    expect(next.load_duration).toBeGreaterThan(0); // loaded again
    const alpha = (await routerModels()).get("alpha:latest")!;
    expect(alpha.status).toBe("loaded");
    expect(argOf(alpha.args, "--model")).toBe(betaModel);
  });

  it("/api/create over it while a variant (num_ctx) streams /api/generate: the stream ends normally; the next request has the new system prompt and parameters", { timeout: 300_000 }, async () => {
    const ask = { model: "alpha", prompt: "Where is the treasure?", options: { num_ctx: 512, num_predict: 1, temperature: 0 } };
    const plain = (await ollama.generate(ask)).prompt_eval_count;
    expect((await routerModels()).get("alpha:latest~ctx512")?.status).toBe("loaded");

    const [stream, created] = await whileStreaming(
      "alpha:latest~ctx512",
      async () => pieces(await ollama.generate({ ...ask, prompt: "tell me a story", stream: true, options: { ...ask.options, num_predict: 24 } })),
      async () => {
        const created = await ollama.create({ model: "alpha", from: "alpha", system: "You are a pirate. Answer as a pirate would, with many nautical words.", parameters: { temperature: 0.25 }, stream: false });
        // another model served meanwhile, in a configuration of its own: the router re-reads its preset again
        const other = await ollama.generate({ model: "beta", prompt: "hi", options: { num_ctx: 1024, num_predict: 1 } });
        return { created, other };
      },
    );
    expect(created.created).toEqual({ status: "success" });
    expect(created.other.done).toBe(true);
    expectComplete(stream, 24);

    const next = await ollama.generate(ask);
    expect(next.load_duration).toBeGreaterThan(0);
    expect(next.prompt_eval_count).toBeGreaterThan(plain); // the system prompt is in the prompt
    const variant = (await routerModels()).get("alpha:latest~ctx512")!;
    expect(variant.status).toBe("loaded");
    expect(argOf(variant.args, "--temperature")).toBe("0.25"); // the variant was built again from the new files
    expect(argOf(variant.args, "--ctx-size")).toBe("512");
  });

  it("/api/pull of a newer version: the stream ends normally from the old version; the next request loads the new one", { timeout: 300_000 }, async () => {
    const dir = await temp();
    const v1 = await registry.pushModel({ name: "library/gamma:1", model: (await generateFixtureFiles("gemma3", { seed: 7, layout: "ollama", variant: "1b" }, dir)).text, params: { num_ctx: 256 } });
    expect(await ollama.pull({ model: v1.ref, insecure: true, stream: false })).toEqual({ status: "success" });
    await ollama.generate({ model: v1.ref, prompt: "hi", options: { num_predict: 1 } });
    const oldModel = argOf((await routerModels()).get(v1.ref)!.args, "--model");

    const [stream, pulled] = await whileStreaming(
      v1.ref,
      async () => pieces(await ollama.generate({ model: v1.ref, prompt: "tell me a story", stream: true, options: { num_predict: 24, temperature: 0 } })),
      async () => {
        const v2 = await registry.pushModel({ name: "library/gamma:1", model: (await generateFixtureFiles("gemma3", { seed: 9, layout: "ollama", variant: "1b" }, await temp())).text, params: { num_ctx: 256 } });
        return ollama.pull({ model: v2.ref, insecure: true, stream: false });
      },
    );
    expect(pulled).toEqual({ status: "success" });
    expectComplete(stream, 24);

    const next = await ollama.generate({ model: v1.ref, prompt: "hi", options: { num_predict: 2 } });
    expect(next.load_duration).toBeGreaterThan(0);
    const entry = (await routerModels()).get(v1.ref)!;
    expect(entry.status).toBe("loaded");
    expect(argOf(entry.args, "--model")).not.toBe(oldModel);
  });
});
