import { tempDirs as tempDirsFor } from "@compat/testkit";
import { afterAll } from "vitest";

export { llamaServerPath } from "@compat/testkit";

/** A fresh temp dir per call, all removed after the file's tests. */
export const tempDirs = (): (() => Promise<string>) => tempDirsFor(afterAll);

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
