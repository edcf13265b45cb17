import { join } from "node:path";
import { writeGguf } from "@compat/gguf";
import { generateFixture, generateFixtureFiles } from "@compat/testkit";
import { buildOllamaStore, type StoreModelSpec } from "@compat/server-bridge";

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

/** A llama.cpp-native llama GGUF (what `ollama pull` of an older model leaves). */
export async function llamaFile(dir: string, seed = 1): Promise<string> {
  const native = generateFixture("llama", { seed, layout: "native" });
  const path = join(dir, `llama-${seed}.gguf`);
  await writeGguf(native.text, path);
  return path;
}

/** A 16x16 grey PPM picture, base64 (llama.cpp's image loader reads PNM). */
export function greyPicture(): string {
  const side = 16;
  return Buffer.concat([Buffer.from(`P6\n${side} ${side}\n255\n`), Buffer.alloc(side * side * 3, 128)]).toString("base64");
}
