/**
 * What the cli tests share: the binary from source (run through tsx), a child process's
 * output and exit, and a fixture made big enough for a translation to take a while.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { request } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { GgmlType, fileSource, readGguf, writeGguf } from "@compat/gguf";
import { generateFixture, startOciRegistry, type OciRegistry } from "@compat/testkit";
import { afterAll, afterEach, beforeAll } from "vitest";
import { DEMO_FIXTURE, demoModelPath } from "../src/demo-fixture";

/** src/bin.ts, run as `node --import <tsx> <bin> …`. */
export const bin = fileURLToPath(new URL("../src/bin.ts", import.meta.url));
export const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * The real ollama-compat binary (from source, through tsx) in its own process, its output
 * collected as it comes; `waitFor` waits for a line to appear (or fails with the stderr so far).
 */
export function spawnCli(args: string[], env: Record<string, string | undefined> = {}) {
  const child = spawn(process.execPath, ["--import", tsx, bin, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const out = { stdout: "", stderr: "" };
  child.stdout!.on("data", (d) => (out.stdout += d));
  child.stderr!.on("data", (d) => (out.stderr += d));
  const closed = exited(child);
  const waitFor = async (re: RegExp, stream: "stdout" | "stderr" = "stdout", timeoutMs = 180_000): Promise<RegExpMatchArray> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = out[stream].match(re);
      if (m) return m;
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`no ${re} in ${stream}; stderr:\n${out.stderr.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { child, out, closed, waitFor };
}

/** GET over node:http, as curl does (fetch refuses some ports outright). */
export function httpGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    })
      .once("error", reject)
      .end();
  });
}

/** Everything the child writes to stdout and stderr, and its exit code, once it has closed. */
export function runToEnd(child: ChildProcess): Promise<Run> {
  return new Promise((resolve, reject) => {
    const stdout = collect(child.stdout);
    const stderr = collect(child.stderr);
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout: stdout(), stderr: stderr() }));
  });
}

/** The text a stream has given so far. */
export function collect(s: NodeJS.ReadableStream | null): () => string {
  let text = "";
  s?.on("data", (d) => (text += d));
  return () => text;
}

/** How the child ended. */
export function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((r) => child.on("close", (code, signal) => r({ code, signal })));
}

/**
 * `small` (a GGUF) with a zero tensor of `size` bytes appended, written to `dir/name.gguf`.
 * The zeros come from a sparse file; with `sparse` the output keeps its holes too, so a big
 * one costs no disk (a translation still reads and writes every byte).
 */
export async function withZeroTensor(small: string, dir: string, name: string, size: number, { sparse = true } = {}): Promise<string> {
  const zerosPath = join(dir, `${name}.zeros`);
  const fh = await open(zerosPath, "w");
  await fh.truncate(size);
  await fh.close();
  const model = await readGguf(small);
  const zeros = await fileSource(zerosPath);
  const path = join(dir, `${name}.gguf`);
  const written = sparse ? join(dir, `${name}.dense`) : path;
  try {
    model.addTensor({ name: "zz.padding", type: GgmlType.I8, shape: [size], data: { kind: "range", source: zeros, offset: 0, length: size } });
    await writeGguf(model, written);
  } finally {
    await model.close();
    await zeros.close?.(); // an added tensor's source is the caller's to close
  }
  if (sparse) {
    execFileSync("cp", ["--sparse=always", written, path]);
    await rm(written);
  }
  await rm(zerosPath);
  return path;
}

/**
 * dist/demo-model.gguf, which `demo` reads, as the build writes it (scripts/demo-model.ts), for
 * tests that run the command from source before any build.
 */
export async function ensureDemoModel(): Promise<void> {
  if (existsSync(demoModelPath())) return;
  await mkdir(dirname(demoModelPath()), { recursive: true });
  const { arch, ...options } = DEMO_FIXTURE;
  await writeGguf(generateFixture(arch, options).text, demoModelPath());
}

/**
 * One test file's real OCI registry (Debian's docker-registry) and the CLI runs it drives: every
 * run still going after a test is killed, and the registry and the file's temp folders go with
 * the file. Call at the top level of the file.
 */
export function registryHarness(prefix: string) {
  const dirs: string[] = [];
  const children: ChildProcess[] = [];
  const h = {
    /** Set before the first test runs. */
    registry: undefined as unknown as OciRegistry,
    async temp(): Promise<string> {
      const d = await mkdtemp(join(tmpdir(), prefix));
      dirs.push(d);
      return d;
    },
    start(args: string[], env: Record<string, string> = {}) {
      const s = spawnCli(args, env);
      children.push(s.child);
      return s;
    },
    async run(args: string[], env: Record<string, string> = {}) {
      const s = h.start(args, env);
      const { code } = await s.closed;
      return { code, ...s.out };
    },
  };
  beforeAll(async () => {
    h.registry = await startOciRegistry();
  }, 120_000);
  afterEach(() => {
    for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });
  afterAll(async () => {
    await h.registry?.stop();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });
  return h;
}
