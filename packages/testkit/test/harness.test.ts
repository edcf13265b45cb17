import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  findLlamaTools,
  killAllSpawned,
  LlamaHarnessError,
  runLlamaQuantize,
  runLoaderInSubprocess,
  runMtmdCli,
  runProcess,
  serverCompletion,
  startLlamaServer,
  type LlamaServer,
} from "@compat/testkit";
import { writeTinyLlama } from "./harness-tiny-llama";

let dir: string;
let valid: string;
const servers: LlamaServer[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "testkit-harness-"));
  valid = join(dir, "tiny-llama.gguf");
  await writeTinyLlama(valid);
  await findLlamaTools(); // builds on a cold machine (hookTimeout allows it); instant from the cache
});
afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
  killAllSpawned();
  await rm(dir, { recursive: true, force: true });
});

describe("llama.cpp tools harness", () => {
  it("finds llama-server, llama-mtmd-cli and llama-quantize", async () => {
    const tools = await findLlamaTools();
    for (const path of [tools.server, tools.mtmdCli, tools.quantize]) expect((await stat(path)).isFile()).toBe(true);
    expect(tools.logDrain, "build-llama-tools.sh builds liblog-drain.so").toBeDefined();
  });

  it("starts llama-server on loopback, reports healthy, completes greedily, stops", async () => {
    const server = await startLlamaServer({ model: valid });
    servers.push(server);
    expect(server.url).toBe(`http://127.0.0.1:${server.port}`);
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);

    const first = await serverCompletion(server, { prompt: "Hello", nPredict: 4 });
    expect(first.tokens).toHaveLength(4);
    const again = await serverCompletion(server, { prompt: "Hello", nPredict: 4 });
    expect(again.tokens).toEqual(first.tokens);

    await server.stop();
    await expect(fetch(`${server.url}/health`)).rejects.toThrow();
  });

  it("fails to start llama-server on a broken model with llama.cpp's message", async () => {
    const bad = join(dir, "server-unknown-arch.gguf");
    await writeTinyLlama(bad, { arch: "nosucharch" });
    const attempt = startLlamaServer({ model: bad });
    await expect(attempt).rejects.toBeInstanceOf(LlamaHarnessError);
    await expect(attempt).rejects.toThrow(/unknown model architecture: 'nosucharch'/);
  });

  it("quantizes to Q8_0 with llama-quantize, and the result loads and generates", async () => {
    const q8 = join(dir, "tiny-llama-q8_0.gguf");
    const run = await runLlamaQuantize(valid, q8, "Q8_0");
    expect(run.ok, run.stderr + run.stdout).toBe(true);
    expect((await stat(q8)).size).toBeLessThan((await stat(valid)).size);
    const loaded = await runLoaderInSubprocess(q8, { maxTokens: 4 });
    expect(loaded).toMatchObject({ ok: true });
    if (loaded.ok) expect(loaded.tokens).toHaveLength(4);
  });

  it("rejects an unknown architecture with llama.cpp's own message", async () => {
    const bad = join(dir, "unknown-arch.gguf");
    await writeTinyLlama(bad, { arch: "nosucharch" });
    const result = await runLoaderInSubprocess(bad);
    expect(result).toMatchObject({ ok: false });
    if (!result.ok) expect(result.error).toMatch(/unknown model architecture: 'nosucharch'/);
  });

  it("runs llama-mtmd-cli and reports its failure when the projector is not a CLIP model", async () => {
    const image = join(dir, "pixel.ppm");
    await writeFile(image, Buffer.concat([Buffer.from("P6\n1 1\n255\n"), Buffer.from([255, 0, 0])]));
    const run = await runMtmdCli({ model: valid, mmproj: valid, image, prompt: "Describe." });
    expect(run).toMatchObject({ ok: false, code: 1 });
    // the tool's last log lines survive thanks to the log-drain preload
    expect(run.stderr + run.stdout).toMatch(/Failed to load CLIP model/);
  });

  it("stops a process that outlives its timeout and says so", async () => {
    const run = await runProcess("sleep", ["30"], { timeoutMs: 200 });
    expect(run).toMatchObject({ ok: false, timedOut: true });
  });
});
