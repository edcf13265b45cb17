/** Requests that prove a running llama-server works: a few tokens, one image or audio answer, one embedding; and what to say when it did not start. */
import { readGguf } from "@compat/gguf";
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

/** One second of a 440 Hz tone as a 16 kHz mono 16-bit WAV, which llama.cpp's audio loader reads (and resamples as it needs). */
export function testWav(): Buffer {
  const rate = 16_000;
  const pcm = Buffer.alloc(rate * 2);
  for (let i = 0; i < rate; i++) pcm.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), i * 2);
  const head = Buffer.alloc(44);
  head.write("RIFF", 0);
  head.writeUInt32LE(36 + pcm.length, 4);
  head.write("WAVEfmt ", 8);
  head.writeUInt32LE(16, 16); // the fmt chunk's size
  head.writeUInt16LE(1, 20); // PCM
  head.writeUInt16LE(1, 22); // mono
  head.writeUInt32LE(rate, 24);
  head.writeUInt32LE(rate * 2, 28); // bytes per second
  head.writeUInt16LE(2, 32); // bytes per frame
  head.writeUInt16LE(16, 34); // bits per sample
  head.write("data", 36);
  head.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([head, pcm]);
}

/** A chat completion about testWav(): the projector encoded it when the prompt has more tokens than the text alone. */
export async function audioAnswer(url: string, prompt = "What is this sound?", maxTokens = 4): Promise<Answer> {
  return answer(
    await post(`${url}/v1/chat/completions`, {
      messages: [{ role: "user", content: [{ type: "text", text: prompt }, { type: "input_audio", input_audio: { data: testWav().toString("base64"), format: "wav" } }] }],
      max_tokens: maxTokens,
      temperature: 0,
      grammar: PRINTABLE,
    }),
  );
}

/**
 * What a projector (mmproj GGUF) encodes, so that its check asks for that: images
 * (clip.has_vision_encoder) and sound (clip.has_audio_encoder). A projector that says
 * neither is a vision one (old LLaVA projectors carry no such key).
 */
export async function projectorInputs(path: string): Promise<{ image: boolean; audio: boolean }> {
  const m = await readGguf(path);
  try {
    const audio = m.tryGetBool("clip.has_audio_encoder") === true;
    return { image: m.tryGetBool("clip.has_vision_encoder") ?? !audio, audio };
  } finally {
    await m.close();
  }
}

/**
 * The answers that prove a projector loaded in llama-server at `url` works: an image answer
 * where it encodes images, an audio answer where it encodes sound (an audio-only projector is
 * asked no image), each with more prompt tokens than the same question without the input.
 * Returns one line per check; throws naming the input that was not encoded.
 */
export async function projectorAnswers(url: string, mmproj: string): Promise<Array<{ input: "image" | "audio"; ok: boolean; detail: string }>> {
  const inputs = await projectorInputs(mmproj);
  const out: Array<{ input: "image" | "audio"; ok: boolean; detail: string }> = [];
  if (inputs.image) {
    const without = await textAnswer(url, "What is in this image?");
    const a = await imageAnswer(url);
    out.push({ input: "image", ok: a.promptTokens > without.promptTokens, detail: `${a.promptTokens - without.promptTokens} image tokens, answer ${JSON.stringify(a.text)}` });
  }
  if (inputs.audio) {
    const without = await textAnswer(url, "What is this sound?");
    const a = await audioAnswer(url);
    out.push({ input: "audio", ok: a.promptTokens > without.promptTokens, detail: `${a.promptTokens - without.promptTokens} audio tokens, answer ${JSON.stringify(a.text)}` });
  }
  return out;
}

/** An embedding: its length. */
export async function embeddingLength(url: string): Promise<number> {
  const body = await post(`${url}/v1/embeddings`, { input: "hello world" });
  const e = (body.data as Array<{ embedding: number[] }> | undefined)?.[0]?.embedding ?? [];
  if (e.length === 0 || !e.every((x) => Number.isFinite(x))) throw new Error("llama-server returned an empty or non-finite embedding");
  return e.length;
}

/**
 * llama.cpp's own words for what went wrong: the first line it logged as an error (level E),
 * else the first line that reads as one (the first is the most specific: later lines only
 * repeat "failed to load model"; a warning before it, such as common_fit_params' "failed to
 * fit params", is not the cause), without the timestamp and level prefix; else its last lines.
 */
export function llamaErrorText(lines: readonly string[]): string {
  const parsed = lines.map((l) => {
    const m = /^\s*\d+\.\d+\.\d+\.\d+ ([EWID]) /.exec(l);
    return { level: m?.[1], text: (m ? l.slice(m[0].length) : l).trim() };
  });
  const clean = parsed.filter((l) => l.text !== "");
  const first = clean.find((l) => l.level === "E") ?? clean.find((l) => /error|failed|exception|abort|invalid|missing|not found/i.test(l.text));
  return first?.text ?? clean.slice(-3).map((l) => l.text).join(" | ");
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

/**
 * A start that ended before llama-server was ready (the bridge's SERVER_START_FAILED or
 * SERVER_START_TIMEOUT), in one line: the bridge's first line (the exit status) and llama.cpp's
 * own reason, which the bridge's message has on the lines after it, or that it printed nothing.
 */
export function notReadyText(e: BridgeError, again: string): string {
  const first = e.message.split("\n")[0]!.replace(/:$/, "");
  const lines = (e.details.lastLines as string[] | undefined) ?? [];
  const said = lines.some((l) => l.trim() !== "") ? startFailureText(e, again) : "it printed nothing (llama.cpp's logger can lose its last lines when the process exits at once)";
  return `${first}: ${said}`;
}
