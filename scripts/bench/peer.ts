// `npm run bench -- peer` (issue 40): the same model run three ways, side by side, in alternating
// runs on one machine:
//   A  Ollama's own runtime: the llama-server an Ollama install carries in lib/ollama/
//      (OLLAMA_LLAMA_SERVER; nothing here ships or builds it) on the raw blob;
//   B1 stock llama-server on our translated copy (`ollama-compat translate`);
//   B2 stock llama-server on our mount of the store (`ollama-compat mount`).
// For a model Ollama loads without mmap (glmocr: its gate+up concat) and one it loads with mmap
// (gemma3): time to /health warm and cold, anonymous (private) memory of one server and of two,
// tokens/s, and whether the next-token log-probabilities are equal to B1's.
// BENCH_PEER_NOMMAP / BENCH_PEER_MMAP: Ollama blobs to use instead of the generated fixtures.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { buildOllamaStore } from "@compat/store";
import { findLlamaTools, generateFixtureFiles, PRINTABLE_ASCII_GRAMMAR } from "@compat/testkit";
import { dropCaches, mount } from "./mount";
import type { MountBenchContext } from "./mount";
import { median } from "./race.mjs";

const MiB = 2 ** 20;
/** The same arguments for every way: a small context, no warm-up run, two threads. */
const SERVER_ARGS = ["--host", "127.0.0.1", "--port", "0", "--threads", "2", "--no-warmup", "-c", "512"];
const PROMPT = "The capital of France is";

interface Way {
  name: "A" | "B1" | "B2";
  server: string;
  model: string;
}

interface Running {
  child: ChildProcess;
  url: string;
}

/** Starts llama-server and resolves once /health answers 200. */
async function start(way: Way): Promise<Running> {
  const child = spawn(way.server, ["--model", way.model, ...SERVER_ARGS], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log = (log + d).slice(-20_000)));
  const deadline = Date.now() + 600_000;
  for (;;) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${way.name}: llama-server not healthy on ${way.model}: ${log.slice(-2000)}`);
    }
    const url = /listening on (http:\/\/[\d.]+:\d+)/.exec(log)?.[1];
    if (url !== undefined && (await fetch(`${url}/health`).then((r) => r.status === 200, () => false))) return { child, url };
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function stop(r: Running): Promise<void> {
  if (r.child.exitCode !== null) return;
  const closed = new Promise((res) => r.child.once("close", res));
  r.child.kill("SIGKILL");
  await closed;
}

/** Anonymous memory of a process (smaps_rollup): what it holds privately, not file pages it maps. */
function anonymousBytes(pid: number): number {
  return Number(/^Anonymous:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"))?.[1] ?? 0) * 1024;
}

/**
 * Set for the generated fixtures: their random weights emit stray UTF-8 bytes, which
 * llama-server's output parser refuses (500), so their output is kept to printable ASCII.
 */
let grammar: string | undefined;

async function completion(url: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await fetch(`${url}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: PROMPT, temperature: 0, top_k: 1, seed: 0, cache_prompt: false, ...(grammar !== undefined ? { grammar } : {}), ...body }),
  });
  if (r.status !== 200) throw new Error(`/completion: ${r.status} ${await r.text()}`);
  return (await r.json()) as Record<string, unknown>;
}

/** The next token's top 10 candidates with their log-probabilities, as llama-server reports them. */
async function nextTokenProbs(url: string): Promise<string> {
  const j = await completion(url, { n_predict: 1, n_probs: 10 });
  const probs = j.completion_probabilities;
  if (!Array.isArray(probs) || probs.length === 0) throw new Error(`/completion with n_probs answered no completion_probabilities: ${JSON.stringify(j).slice(0, 500)}`);
  return JSON.stringify(probs);
}

async function tokensPerSecond(url: string): Promise<number> {
  const j = await completion(url, { n_predict: 32, ignore_eos: true });
  return Number((j.timings as Record<string, number>).predicted_per_second);
}

/** What one way measured. */
interface Measured {
  warm: number;
  cold?: number;
  anon1: number;
  anon2: number;
  tps: number;
  probs: string;
}

/** The translated model's text file under a mount point (the one GGUF that is not a projector). */
function mountedText(point: string): string {
  for (const e of readdirSync(point, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith(".gguf") && !e.name.startsWith("mmproj-")) return join(e.parentPath, e.name);
  }
  throw new Error(`no model file under ${point}`);
}

/** A vs B1 vs B2 for one model; B1 and B2 always, A when OLLAMA_LLAMA_SERVER is given. */
async function compare(ctx: MountBenchContext, label: string, blob: string, stock: string, ollama: string | undefined, work: string): Promise<Map<string, Measured>> {
  mkdirSync(work, { recursive: true });
  const copy = join(work, "copy.gguf");
  execFileSync(process.execPath, [ctx.cli, "translate", blob, "-o", copy, "--quiet"], { stdio: ["ignore", "ignore", "pipe"] });
  const store = join(work, "store");
  await buildOllamaStore(store, [{ name: "peer:latest", model: blob }]);
  const point = join(work, "mnt");
  const unmount = mount(ctx.cli, point, store, join(work, "cache"));
  try {
    const ways: Way[] = [
      ...(ollama !== undefined ? [{ name: "A" as const, server: ollama, model: blob }] : []),
      { name: "B1", server: stock, model: copy },
      { name: "B2", server: stock, model: mountedText(point) },
    ];
    const once = (w: Way) => async () => stop(await start(w));
    const warm = await ctx.race(ways.map(once));
    const cold = dropCaches() ? await ctx.race(ways.map(once), Math.min(ctx.runs, 5), () => void dropCaches()) : undefined;
    const out = new Map<string, Measured>();
    for (const [i, w] of ways.entries()) {
      const first = await start(w);
      try {
        const probs = await nextTokenProbs(first.url);
        const tps = median([await tokensPerSecond(first.url), await tokensPerSecond(first.url), await tokensPerSecond(first.url)]);
        const anon1 = anonymousBytes(first.child.pid!);
        const second = await start(w);
        const anon2 = anon1 + anonymousBytes(second.child.pid!);
        await stop(second);
        out.set(w.name, { warm: warm[i]!, ...(cold ? { cold: cold[i]! } : {}), anon1, anon2, tps, probs });
      } finally {
        await stop(first);
      }
    }
    return out;
  } catch (e) {
    throw new Error(`peer bench, ${label}: ${(e as Error).message}`);
  } finally {
    unmount();
  }
}

export async function peerRows(ctx: MountBenchContext): Promise<void> {
  const { server: stock } = await findLlamaTools();
  const given = process.env.OLLAMA_LLAMA_SERVER;
  let ollama: string | undefined;
  if (given === undefined || given === "") {
    console.error("  (OLLAMA_LLAMA_SERVER not set: the A rows, Ollama's own runtime, are skipped; set OLLAMA_LLAMA_SERVER to the llama-server of an Ollama install, e.g. /usr/local/lib/ollama/llama-server)");
  } else {
    try {
      accessSync(given, constants.X_OK);
      ollama = given;
    } catch {
      console.error(`  (OLLAMA_LLAMA_SERVER=${given} is not an executable file: the A rows are skipped)`);
    }
  }
  const work = join(ctx.dir, "peer");
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const models: Array<[string, string, boolean]> = [
    ["glmocr (gate+up concat: Ollama loads it without mmap)", process.env.BENCH_PEER_NOMMAP ?? (await generateFixtureFiles("glmocr", { seed: 1, layout: "ollama" }, join(work, "glmocr-src"))).text, true],
    ["gemma3 (Ollama loads it with mmap)", process.env.BENCH_PEER_MMAP ?? (await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama" }, join(work, "gemma3-src"))).text, false],
  ];
  const table = ["| model | measure | A: Ollama's runtime, raw blob | B1: stock llama-server, translated copy | B2: stock llama-server, mount |", "|---|---|---:|---:|---:|"];
  for (const [i, [label, blob, noMmap]] of models.entries()) {
    if (!existsSync(blob)) throw new Error(`peer bench: ${blob} does not exist`);
    grammar = blob.startsWith(work) ? PRINTABLE_ASCII_GRAMMAR : undefined;
    const m = await compare(ctx, label, blob, stock, ollama, join(work, `m${i}`));
    const cell = (w: string, f: (x: Measured) => string) => (m.has(w) ? f(m.get(w)!) : "—");
    const line = (measure: string, f: (x: Measured) => string) => table.push(`| ${label} | ${measure} | ${cell("A", f)} | ${cell("B1", f)} | ${cell("B2", f)} |`);
    const mib = (b: number) => `${(b / MiB).toFixed(0)} MiB`;
    line("time to /health, warm", (x) => ctx.ms(x.warm));
    line("time to /health, cold (caches dropped)", (x) => (x.cold === undefined ? "—" : ctx.ms(x.cold)));
    line("anonymous memory, one server", (x) => mib(x.anon1));
    line("anonymous memory, two servers", (x) => mib(x.anon2));
    line("tokens/s (32 tokens)", (x) => x.tps.toFixed(1));
    const ref = m.get("B1")!.probs;
    line("next-token log-probabilities equal to B1's", (x) => (x.probs === ref ? "yes" : "no"));
    const a = m.get("A");
    const b2 = m.get("B2")!;
    ctx.row({
      scenario: `peer, ${label}: next-token log-probabilities (top 10) of the mount (B2) equal to the translated copy's (B1)`,
      ours: b2.probs === ref ? "equal" : "differ",
      baseline: "B1",
      ratio: b2.probs === ref ? 1 : 0,
      target: "equal",
      pass: b2.probs === ref,
    });
    if (a === undefined) continue;
    // the targets are for the model Ollama loads without mmap; the other informs
    ctx.row({
      scenario: `peer, ${label}: time to /health (warm) on the mount (B2) vs Ollama's runtime on the blob (A)`,
      ours: ctx.ms(b2.warm),
      baseline: ctx.ms(a.warm),
      ratio: b2.warm / a.warm,
      target: noMmap ? "≤ 0.5x" : "informs",
      pass: noMmap ? b2.warm / a.warm <= 0.5 : undefined,
    });
    ctx.row({
      scenario: `peer, ${label}: anonymous memory of one server on the mount (B2) vs Ollama's runtime (A)`,
      ours: mib(b2.anon1),
      baseline: mib(a.anon1),
      ratio: b2.anon1 / a.anon1,
      target: noMmap ? "≤ 0.05x" : "informs",
      pass: noMmap ? b2.anon1 / a.anon1 <= 0.05 : undefined,
    });
    ctx.row({
      scenario: `peer, ${label}: next-token log-probabilities of Ollama's runtime (A) equal to the translated copy's (B1)`,
      ours: a.probs === ref ? "equal" : "differ",
      baseline: "B1",
      ratio: a.probs === ref ? 1 : 0,
      target: "equal",
      pass: a.probs === ref,
    });
  }
  rmSync(work, { recursive: true, force: true });
  console.log(`\nA vs B1 vs B2 (medians of ${ctx.runs} alternating runs; text model only, same llama-server arguments):\n\n${table.join("\n")}`);
}
