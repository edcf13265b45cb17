import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";

/** A fresh temp dir per call, all removed after the file's tests. */
export function tempDirs(): () => Promise<string> {
  const made: string[] = [];
  afterAll(async () => {
    for (const d of made) await rm(d, { recursive: true, force: true });
  });
  return async () => {
    const d = await mkdtemp(join(tmpdir(), "compat-bridge-"));
    made.push(d);
    return d;
  };
}

import { findLlamaTools } from "@compat/testkit";

/** llama-server from the shared tools build ($LLAMA_BIN, else scripts/build-llama-tools.sh). */
export async function llamaServerPath(): Promise<string> {
  return (await findLlamaTools()).server;
}

/** Options every test launch uses: small context, 2 threads, no warmup. */
export const SMALL = ["--threads", "2", "--no-warmup"];

/** A greedy, short OpenAI-style chat completion, printable ASCII only (tiny random models emit stray bytes). */
export async function chat(url: string, model: string | undefined, text = "hello"): Promise<{ status: number; body: Record<string, unknown> }> {
  const request = (): Promise<Response> =>
    fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        ...(model ? { model } : {}),
        messages: [{ role: "user", content: text }],
        max_tokens: 4,
        temperature: 0,
        grammar: "root ::= [ -~]*",
      }),
      signal: AbortSignal.timeout(120_000),
    });
  // fetch reuses keep-alive connections, and llama-server's router sometimes closes one just
  // as the next request goes out on it (seen: 2 runs in 25, "other side closed" on a socket
  // that had carried earlier answers). Nothing was answered, so asking again is safe.
  const r = await request().catch((e: unknown) => {
    if ((e as { cause?: { code?: string } }).cause?.code !== "UND_ERR_SOCKET") throw e;
    return request();
  });
  const t = await r.text();
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(t) as Record<string, unknown>;
  } catch {
    body = { text: t };
  }
  return { status: r.status, body };
}

export function chatContent(body: Record<string, unknown>): unknown {
  return (body.choices as Array<{ message: { content: unknown } }> | undefined)?.[0]?.message.content;
}
