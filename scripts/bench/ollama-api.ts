/**
 * The Ollama API's cost over llama-server (issue 29): tokens per second streamed through
 * /api/chat against the same model's /v1/chat/completions straight from the llama-server
 * router behind it, and what /api/tags and the first streamed token add. One real router, one
 * tiny model (the worst case for a proxy: its tokens come fastest), candidates alternated.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeGguf } from "@compat/gguf";
import { serveOllama } from "@compat/ollama-api";
import { buildOllamaStore, ModelStore } from "@compat/store";
import { findLlamaTools, generateFixture } from "@compat/testkit";
import { median } from "./race.mjs";

export interface ApiRow {
  scenario: string;
  ours: number;
  baseline: number;
  unit: "tok/s" | "ms" | "µs";
  /** ratio ours/baseline; for latencies the target is on the difference; undefined: a row that informs. */
  pass: boolean | undefined;
  target: string;
}

const TOKENS = 256;

/**
 * One streamed answer: time to the first piece, the pace after it (pieces per second), and the
 * CPU this process spent on it (the API's work when it goes through /api/chat, the client's in
 * both cases) per piece.
 */
async function stream(url: string, body: unknown, isPiece: (line: string) => boolean): Promise<{ firstMs: number; tokPerS: number; pieces: number; cpuUs: number }> {
  const cpu = process.cpuUsage();
  const send = () => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  let t0 = performance.now();
  const r = await send().catch((e: { cause?: { code?: string } }) => {
    if (e.cause?.code !== "UND_ERR_SOCKET") throw e;
    t0 = performance.now(); // a kept-alive connection closed under the request: sent again, timed from there
    return send();
  });
  const reader = r.body!.getReader();
  const decoder = new TextDecoder();
  let partial = "";
  let first = 0;
  let last = 0;
  let pieces = 0;
  for (let c = await reader.read(); !c.done; c = await reader.read()) {
    const parts = (partial + decoder.decode(c.value, { stream: true })).split("\n");
    partial = parts.pop()!;
    for (const line of parts) {
      if (!isPiece(line)) continue;
      pieces++;
      last = performance.now();
      if (pieces === 1) first = last;
    }
  }
  const used = process.cpuUsage(cpu);
  return { firstMs: first - t0, tokPerS: (pieces - 1) / ((last - first) / 1000), pieces, cpuUs: (used.user + used.system) / pieces };
}

export async function ollamaApiRows(runs: number): Promise<ApiRow[]> {
  const dir = mkdtempSync(join(tmpdir(), "ollama-compat-bench-api-"));
  try {
    const fx = generateFixture("llama", { seed: 1, layout: "native" });
    const file = join(dir, "llama.gguf");
    await writeGguf(fx.text, file);
    const root = join(dir, "store");
    await buildOllamaStore(root, [{ name: "bench", model: file, params: { num_ctx: 1024 } }]);
    const server = await serveOllama({ models: "all", store: new ModelStore(root), cache: { dir: join(dir, "cache") }, llamaServer: (await findLlamaTools()).server, args: ["--threads", "1", "--no-warmup"], port: 0 });
    try {
      const prompt = [{ role: "user", content: "hello" }];
      const ours = () => stream(`${server.url}/api/chat`, { model: "bench", messages: prompt, options: { temperature: 0, num_predict: TOKENS } }, (l) => l.includes('"done":false'));
      const direct = () =>
        stream(`${server.router.url}/v1/chat/completions`, { model: "bench:latest", messages: prompt, stream: true, max_tokens: TOKENS, temperature: 0, top_k: 40, top_p: 0.9, min_p: 0, n_keep: 4, repeat_last_n: 64 }, (l) => l.startsWith("data: {") && /"content":"/.test(l));
      // llama-server may close a kept-alive connection just as the next request goes out on it
      // ("other side closed", nothing answered): that sample is taken again
      const timed = async (url: string): Promise<number> => {
        for (;;) {
          const t = performance.now();
          try {
            await (await fetch(url)).text();
            return performance.now() - t;
          } catch (e) {
            if ((e as { cause?: { code?: string } }).cause?.code !== "UND_ERR_SOCKET") throw e;
          }
        }
      };
      const tags = () => timed(`${server.url}/api/tags`);
      const models = () => timed(`${server.router.url}/v1/models`);
      await ours();
      await direct();
      const o: Array<Awaited<ReturnType<typeof stream>>> = [];
      const d: typeof o = [];
      // a token takes a few milliseconds of llama-server's time, and the machine is shared: more
      // runs than elsewhere, alternated
      for (let i = 0; i < Math.max(runs, 11); i++) {
        o.push(await ours());
        d.push(await direct());
      }
      console.error(`  streamed pieces: ours ${o.map((x) => x.pieces).join(",")}; direct ${d.map((x) => x.pieces).join(",")}`);
      const lat: number[] = [];
      const base: number[] = [];
      for (let i = 0; i < 60; i++) {
        lat.push(await tags());
        base.push(await models());
      }
      const tps = [median(o.map((x) => x.tokPerS)), median(d.map((x) => x.tokPerS))] as const;
      const first = [median(o.map((x) => x.firstMs)), median(d.map((x) => x.firstMs))] as const;
      const tagMs = [median(lat.slice(10)), median(base.slice(10))] as const;
      const apiCpu = median(o.map((x) => x.cpuUs)) - median(d.map((x) => x.cpuUs));
      const tokenUs = 1e6 / tps[1];
      return [
        { scenario: `tokens/s streamed through /api/chat vs llama-server's /v1/chat/completions, same model, ${TOKENS} tokens`, ours: tps[0], baseline: tps[1], unit: "tok/s", pass: tps[0] / tps[1] >= 0.97, target: "≥ 0.97x" },
        { scenario: "  first streamed token through /api/chat vs straight from llama-server", ours: first[0], baseline: first[1], unit: "ms", pass: first[0] - first[1] <= 2, target: "adds ≤ 2 ms" },
        { scenario: "  the API's CPU per streamed token (this process, beyond the same client reading llama-server) vs llama-server's time per token", ours: apiCpu, baseline: tokenUs, unit: "µs", pass: undefined, target: "what the proxy costs" },
        { scenario: "  /api/tags vs llama-server's own GET /v1/models", ours: tagMs[0], baseline: tagMs[1], unit: "ms", pass: tagMs[0] - tagMs[1] <= 2, target: "adds ≤ 2 ms" },
      ];
    } finally {
      await server.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
