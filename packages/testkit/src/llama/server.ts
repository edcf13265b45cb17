import { createServer } from "node:net";
import { TestkitError } from "./errors";
import { spawnWithLifetime, stopProcess, tail } from "./processes";
import { findLlamaTools, toolEnv } from "./tools";

export interface StartLlamaServerOptions {
  model: string;
  mmproj?: string;
  /** Extra llama-server arguments, appended (later flags win). */
  args?: string[];
  /** How long to wait for /health to answer 200. Default 120 000 ms. */
  startTimeoutMs?: number;
  /** Kill the server after this long no matter what. Default 10 minutes. */
  lifetimeMs?: number;
  /** A command to run llama-server under, e.g. `["qemu-x86_64", "-cpu", "EPYC-Rome-v1"]` for another CPU. */
  launcher?: readonly string[];
}

export interface LlamaServer {
  url: string;
  port: number;
  /** SIGTERM, then SIGKILL after a grace period; resolves once it has exited. */
  stop(): Promise<void>;
  /** Everything it printed so far (stdout and stderr interleaved). */
  logs(): string;
}

/** Asks the OS for a free loopback port. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/**
 * Starts llama-server on 127.0.0.1 and a port of the kernel's choosing (CPU build, so no
 * -ngl), small context, one slot, offline (never downloads), and waits until it says where
 * it listens (it does once the model is loaded) and GET /health is 200. `--port 0` lets
 * llama-server bind the port itself: a probed port, closed and handed on, could be taken by
 * another test worker's server at the same moment, whose /health would then answer for ours.
 * Fails with llama-server's own log tail if it exits or stalls before that.
 */
export async function startLlamaServer(options: StartLlamaServerOptions): Promise<LlamaServer> {
  const tools = await findLlamaTools();
  const { startTimeoutMs = 120_000, lifetimeMs = 10 * 60_000 } = options;
  const args = [
    ...["-m", options.model, ...(options.mmproj ? ["--mmproj", options.mmproj] : [])],
    ...["--host", "127.0.0.1", "--port", "0"],
    ...["-c", "512", "-np", "1", "-t", "2", "--no-webui", "--offline", "--no-warmup"],
    ...(options.args ?? []),
  ];
  const [command, ...prefix] = [...(options.launcher ?? []), tools.server];
  const child = spawnWithLifetime(command!, [...prefix, ...args], lifetimeMs, { env: toolEnv(tools), stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const append = (chunk: string) => {
    output += chunk;
    if (output.length > 1 << 20) output = output.slice(-(1 << 19));
  };
  child.stdout?.setEncoding("utf8").on("data", append);
  child.stderr?.setEncoding("utf8").on("data", append);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const lifetime = setTimeout(() => void stopProcess(child), lifetimeMs);
  lifetime.unref();

  const stop = async () => {
    clearTimeout(lifetime);
    await stopProcess(child);
  };

  const deadline = Date.now() + startTimeoutMs;
  let lastStatus = "no answer";
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new TestkitError(
        "SERVER_START_FAILED",
        `llama-server exited (${child.exitCode ?? child.signalCode}) before becoming healthy:\n${tail(output)}`,
      );
    }
    if (Date.now() > deadline) {
      await stop();
      throw new TestkitError("SERVER_START_FAILED", `llama-server not healthy after ${startTimeoutMs} ms (${lastStatus}):\n${tail(output)}`);
    }
    const port = Number(/listening on http:\/\/[^\s]+:(\d+)/.exec(output)?.[1] ?? 0);
    if (port > 0) {
      const url = `http://127.0.0.1:${port}`;
      try {
        const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
        if (response.status === 200) return { url, port, stop, logs: () => output };
        lastStatus = `HTTP ${response.status}`;
      } catch {
        lastStatus = "no answer";
      }
    } else {
      lastStatus = "not listening yet";
    }
    await Promise.race([new Promise((resolve) => setTimeout(resolve, 100)), exited]);
  }
}

/** GBNF for printable ASCII: keeps a tiny random model's output valid UTF-8. */
export const PRINTABLE_ASCII_GRAMMAR = "root ::= [ -~]*";

export interface CompletionOptions {
  prompt: string;
  /** Default 4. */
  nPredict?: number;
  /**
   * GBNF grammar; default PRINTABLE_ASCII_GRAMMAR, null for none. Tiny random
   * models emit stray UTF-8 bytes, and llama-server's output parser answers 500
   * ("does not match the expected Content-only format") on invalid UTF-8, so
   * by default greedy sampling is restricted to printable ASCII.
   */
  grammar?: string | null;
  timeoutMs?: number;
}

export interface CompletionResult {
  content: string;
  tokens: number[];
  /** The raw JSON answer of /completion. */
  raw: Record<string, unknown>;
}

/** One greedy POST /completion of exactly nPredict tokens (end-of-generation ignored). */
export async function serverCompletion(server: Pick<LlamaServer, "url">, options: CompletionOptions): Promise<CompletionResult> {
  const { prompt, nPredict = 4, grammar = PRINTABLE_ASCII_GRAMMAR, timeoutMs = 60_000 } = options;
  const response = await fetch(`${server.url}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      prompt,
      n_predict: nPredict,
      temperature: 0,
      top_k: 1,
      seed: 0,
      cache_prompt: false,
      return_tokens: true,
      // Random weights pick end-of-generation at random; we want nPredict tokens.
      ignore_eos: true,
      ...(grammar ? { grammar } : {}),
    }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  if (!response.ok) throw new TestkitError("SERVER_REQUEST_FAILED", `/completion answered ${response.status}: ${text}`);
  const raw = JSON.parse(text) as Record<string, unknown>;
  return {
    content: typeof raw.content === "string" ? raw.content : "",
    tokens: Array.isArray(raw.tokens) ? (raw.tokens as number[]) : [],
    raw,
  };
}
