/** Requests that prove a running llama-server works: a few tokens, one image answer, one embedding; and what to say when it did not start. */
import { BridgeError } from "@compat/server-bridge";

/** A 16x16 grey test image as PPM, a format llama.cpp's image loader (stb_image) reads. */
export function testImage(side = 16): Buffer {
  return Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), Buffer.alloc(side * side * 3, 128)]);
}

export interface Answer {
  text: string;
  promptTokens: number;
  completionTokens: number;
}

async function post(url: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(300_000),
  });
  const json = (await r.json().catch(() => ({}))) as Record<string, unknown>;
  if (r.status !== 200) {
    const err = json.error as { message?: string } | undefined;
    throw new Error(`llama-server answered HTTP ${r.status}: ${err?.message ?? JSON.stringify(json)}`);
  }
  return json;
}

/** Tiny random-weight models say random things: a grammar keeps the answer printable. */
const PRINTABLE = "root ::= [ -~]*";

function answer(body: Record<string, unknown>): Answer {
  const usage = body.usage as { prompt_tokens?: number; completion_tokens?: number } | undefined;
  const text = (body.choices as Array<{ message?: { content?: string } }> | undefined)?.[0]?.message?.content ?? "";
  return { text, promptTokens: usage?.prompt_tokens ?? 0, completionTokens: usage?.completion_tokens ?? 0 };
}

/** A chat completion of a few tokens. */
export async function textAnswer(url: string, prompt = "Hello", maxTokens = 4): Promise<Answer> {
  return answer(await post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0, grammar: PRINTABLE }));
}

/** A chat completion about testImage(): the projector encoded it when the prompt has more tokens than the text alone. */
export async function imageAnswer(url: string, prompt = "What is in this image?", maxTokens = 4): Promise<Answer> {
  const image = `data:image/ppm;base64,${testImage().toString("base64")}`;
  return answer(
    await post(`${url}/v1/chat/completions`, {
      messages: [{ role: "user", content: [{ type: "text", text: prompt }, { type: "image_url", image_url: { url: image } }] }],
      max_tokens: maxTokens,
      temperature: 0,
      grammar: PRINTABLE,
    }),
  );
}

/** An embedding: its length. */
export async function embeddingLength(url: string): Promise<number> {
  const body = await post(`${url}/v1/embeddings`, { input: "hello world" });
  const e = (body.data as Array<{ embedding: number[] }> | undefined)?.[0]?.embedding ?? [];
  if (e.length === 0 || !e.every((x) => Number.isFinite(x))) throw new Error("llama-server returned an empty or non-finite embedding");
  return e.length;
}

/**
 * llama.cpp's own words for what went wrong: the first error line of its log (the most
 * specific one: later lines only repeat "failed to load model"), without the timestamp
 * and level prefix; else its last lines.
 */
export function llamaErrorText(lines: readonly string[]): string {
  const clean = lines.map((l) => l.replace(/^\s*\d+\.\d+\.\d+\.\d+ [EWID] /, "").trim()).filter(Boolean);
  const first = clean.find((l) => /error|failed|exception|abort|invalid|missing|not found/i.test(l));
  return first ?? clean.slice(-3).join(" | ");
}

/**
 * What to tell a user whose llama-server did not start: for a crash (killed by a signal of
 * its own, see the bridge's SERVER_CRASHED), the signal, its likely cause and the command
 * line that works around it (`again` is the user's command, e.g. "ollama-compat serve
 * gemma3:4b"); else llama.cpp's own error line, or the error's first line.
 */
export function startFailureText(e: unknown, again: string): string {
  if (e instanceof BridgeError && e.code === "SERVER_CRASHED") {
    const around = e.details.workaround as string | undefined;
    const first = e.message.split("\n")[0]!;
    return around ? `${first} (run: ${again} -- ${around})` : first;
  }
  const lines = (e as { details?: { lastLines?: string[] } }).details?.lastLines ?? [];
  if (lines.length > 0) return llamaErrorText(lines);
  return e instanceof Error ? e.message.split("\n")[0]! : String(e);
}
