import { join } from "node:path";
import { GgufValueType, writeGguf } from "@compat/gguf";
import { generateFixture, generateFixtureFiles, llamaServerPath, SMALL_SERVER_ARGS, toByteLevel } from "@compat/testkit";
import { buildOllamaStore, ModelStore, type StoreModelSpec } from "@compat/store";
import { serveOllama, type OllamaServer, type ServeOllamaOptions } from "@compat/ollama-api";

/** Printable ASCII only: tiny random-weight models otherwise emit stray bytes. */
export const PRINTABLE = "root ::= [ -~]*";

/**
 * A store shaped like a real Ollama user's: a vision model (gemma3, tower in the blob), a text
 * model under `latest` (a llama.cpp-native llama GGUF with a Go template and several stop
 * words), and an embedding model.
 */
export async function userStore(root: string, dir: string, extra: StoreModelSpec[] = []): Promise<void> {
  const vision = await generateFixtureFiles("gemma3", { seed: 1, layout: "ollama", variant: "4b-vision" }, dir);
  const embedder = await generateFixtureFiles("embeddinggemma", { seed: 1, layout: "ollama" }, dir);
  const llama = await llamaFile(dir);
  await buildOllamaStore(root, [
    { name: "gemma3:4b", model: vision.text, params: { num_ctx: 1024, stop: ["<end_of_turn>"] }, config: { model_family: "gemma3", model_families: ["gemma3"], model_type: "4.3B", file_type: "Q4_K_M" } },
    {
      name: "llama3.2",
      model: llama,
      params: { num_ctx: 512, temperature: 0.6, stop: ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] },
      template: "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}{{ range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n",
      system: "You are a tiny test model.",
    },
    { name: "embeddinggemma", model: embedder.text, params: { num_ctx: 512 } },
    ...extra,
  ]);
}

/**
 * serveOllama with real llama-server over a new store of two small llama models (`names`, seeds 3
 * and 4, num_ctx 256 in their params), every request held to printable text: random weights
 * sample bytes that are not UTF-8, which llama-server's chat parser answers with a 500, and
 * Ollama's API has no grammar field of its own. `temp` makes the folders; `extra` adds options.
 */
export async function serveTwoLlamas(temp: () => Promise<string>, names: [string, string], extra: Partial<ServeOllamaOptions> = {}): Promise<OllamaServer> {
  const root = await temp();
  const dir = await temp();
  await buildOllamaStore(root, [
    { name: names[0], model: await llamaFile(dir, 3), params: { num_ctx: 256 } },
    { name: names[1], model: await llamaFile(dir, 4), params: { num_ctx: 256 } },
  ]);
  return serveOllama({
    models: "all",
    store: new ModelStore(root),
    cache: { dir: await temp() },
    llamaServer: await llamaServerPath(),
    args: [...SMALL_SERVER_ARGS, "--grammar", PRINTABLE],
    port: 0,
    ...extra,
  });
}

/** A llama.cpp-native llama GGUF (what `ollama pull` of an older model leaves). */
export async function llamaFile(dir: string, seed = 1): Promise<string> {
  const native = generateFixture("llama", { seed, layout: "native" });
  const path = join(dir, `llama-${seed}.gguf`);
  await writeGguf(native.text, path);
  return path;
}

/** The llama fixture without a chat template: a model llama.cpp cannot render chats for, that Ollama renders with its Go template. */
export async function untemplatedLlamaFile(dir: string, seed = 1): Promise<string> {
  const m = generateFixture("llama", { seed, layout: "native" }).text;
  m.delete("tokenizer.chat_template");
  const path = join(dir, `llama-untemplated-${seed}.gguf`);
  await writeGguf(m, path);
  return path;
}

/** A 16x16 grey PPM picture, base64 (llama.cpp's image loader reads PNM). */
export function greyPicture(): string {
  const side = 16;
  return Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), Buffer.alloc(side * side * 3, 128)]).toString("base64");
}

/**
 * A Qwen3-style chat template with a thinking section: the generation prompt opens `<think>`
 * (so a random-weight model's words are its reasoning), or closes it at once when
 * enable_thinking is false; a reasoning level becomes a system line, longer for "high".
 */
export const THINKING_TEMPLATE =
  "{%- if reasoning_effort is defined and reasoning_effort %}<|im_start|>system\nReasoning: {{ reasoning_effort }}{% if reasoning_effort == 'high' %} (think long and hard, step by step, checking every step twice){% endif %}<|im_end|>\n{% endif %}" +
  "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}" +
  "{%- if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

/** The llama fixture with THINKING_TEMPLATE as its chat template. */
export async function thinkingFile(dir: string): Promise<string> {
  const m = generateFixture("llama", { seed: 6, layout: "native" }).text;
  m.setString("tokenizer.chat_template", THINKING_TEMPLATE);
  const path = join(dir, "thinking.gguf");
  await writeGguf(m, path);
  return path;
}

/**
 * A Hermes-style tool-calling chat template (Qwen2.5's shape): tools listed in a system turn, an
 * assistant's tool call rendered as `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`
 * (llama-server learns the format from how the template renders one), tool results as a user
 * turn. One call per turn, so llama-server's grammar ends after it.
 */
export const TOOL_CALL_TEMPLATE =
  "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools><|im_end|>\n{% endif %}" +
  "{%- for m in messages %}" +
  "{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{% set tc = m.tool_calls[0] %}<tool_call>\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments | tojson }}}\n</tool_call><|im_end|>\n" +
  "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n" +
  "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}" +
  "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/** The options under which toolCallingFile's model always calls a tool (see there). */
export const TOOL_CALLING_OPTIONS = { temperature: 0, top_k: 0, top_p: 1, min_p: 0, num_predict: 200 };

/**
 * A model that calls a tool whenever it is given one, for real: llama-server parses the call out
 * of what the model generates, under its own grammar. Random weights never start a tool call,
 * so this one's logits are made flat (output_norm all zeros: every logit is exactly 0) and,
 * greedy with no sampler reordering the candidates (TOOL_CALLING_OPTIONS), it picks the lowest
 * token id allowed. Token 0 is made `<tool_call>\n`, the trigger of llama-server's lazy tool-call
 * grammar, so the first token starts a call; from there the grammar allows only the call, and
 * the lowest id it allows is each next character of it. The whitespace tokens are moved to the
 * end of the vocabulary so that the call is written without the optional spaces, and the
 * grammar's end leaves only end-of-generation tokens. `chatTemplate` null: a file without
 * one (a model rendered with its Go template).
 */
export async function toolCallingFile(dir: string, chatTemplate: string | null = TOOL_CALL_TEMPLATE): Promise<string> {
  const m = generateFixture("llama", { seed: 5, layout: "native" }).text;
  const norm = m.tensors.find((t) => t.name === "output_norm.weight")!;
  m.replaceTensor(norm.name, { name: norm.name, type: norm.type, shape: norm.shape.map(Number), data: { kind: "bytes", bytes: new Uint8Array(Number(norm.shape[0]) * 4) } });
  const tokens = m.getStringArray("tokenizer.ggml.tokens");
  tokens[0] = toByteLevel("<tool_call>\n").join("");
  for (const [k, ws] of ["\t", "\n", " "].entries()) {
    const id = tokens.indexOf(toByteLevel(ws)[0]!);
    const last = tokens.length - 512 + k; // normal tokens, below Llama 3's special ones
    [tokens[id], tokens[last]] = [tokens[last]!, tokens[id]!];
  }
  m.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, tokens);
  if (chatTemplate !== null) m.setString("tokenizer.chat_template", chatTemplate);
  else m.delete("tokenizer.chat_template");
  const path = join(dir, chatTemplate === null ? "tool-calling-no-template.gguf" : "tool-calling.gguf");
  await writeGguf(m, path);
  return path;
}
