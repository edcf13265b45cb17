import type { PreparedModel } from "@compat/prepare";
import { builtinTemplateFor } from "./template";

/** Ollama's default context when the params layer sets none. */
export const DEFAULT_NUM_CTX = 4096;

const QWEN_VL = new Set(["qwen2vl", "qwen25vl", "qwen3vl", "qwen3vlmoe"]);

/** Ollama options (params layer) that map onto a llama-server flag with the same meaning. */
const SAMPLING_FLAGS: ReadonlyArray<[string, string]> = [
  ["num_predict", "--n-predict"],
  ["temperature", "--temp"],
  ["top_k", "--top-k"],
  ["top_p", "--top-p"],
  ["min_p", "--min-p"],
  ["typical_p", "--typical"],
  ["repeat_last_n", "--repeat-last-n"],
  ["repeat_penalty", "--repeat-penalty"],
  ["presence_penalty", "--presence-penalty"],
  ["frequency_penalty", "--frequency-penalty"],
  ["seed", "--seed"],
  ["num_thread", "--threads"],
  ["num_gpu", "--n-gpu-layers"],
  ["num_keep", "--keep"],
];

/**
 * The per-model part of llama-server's arguments, as Ollama's llm/llama_server.go builds
 * them: model, projector, embedding mode, adapters, context, batch, sampling defaults and
 * stop words from the params layer, and a built-in chat template only when the GGUF has
 * none. Host, port and pass-through arguments are added by the caller (later flags win).
 */
export function modelArgs(m: PreparedModel): string[] {
  const p = m.resolved.params;
  const num = (k: string): number | undefined => (typeof p[k] === "number" && Number.isFinite(p[k]) ? (p[k] as number) : undefined);
  const numCtx = num("num_ctx") ?? DEFAULT_NUM_CTX;
  const args = ["--model", m.modelPath, "--ctx-size", String(numCtx), "--parallel", "1"];
  if (m.mmproj) args.push("--mmproj", m.mmproj);
  // Ollama asks Qwen-VL models for at least 1024 image tokens.
  if (m.mmproj && QWEN_VL.has(m.architecture)) args.push("--image-min-tokens", "1024");
  if (m.resolved.adapters.length > 0) for (const a of m.resolved.adapters) args.push("--lora", a);
  const batch = num("num_batch");
  if (m.embedding) {
    args.push("--embedding");
    if (batch && batch > 0) args.push("--batch-size", String(Math.min(batch, numCtx)), "--ubatch-size", String(Math.min(batch, numCtx)));
  } else if (batch && batch > 0) {
    args.push("--batch-size", String(batch), "--ubatch-size", String(batch));
  }
  if (p.use_mmap === false) args.push("--no-mmap");
  for (const [key, flag] of SAMPLING_FLAGS) {
    const v = num(key);
    if (v !== undefined) args.push(flag, String(v));
  }
  const stop = typeof p.stop === "string" ? [p.stop] : Array.isArray(p.stop) ? p.stop.filter((s): s is string => typeof s === "string") : [];
  // llama-server uses --reverse-prompt as the default stop list of requests that name none.
  for (const s of stop) args.push("--reverse-prompt", s);
  if (!m.hasChatTemplate && !m.embedding && m.resolved.template) {
    const name = builtinTemplateFor(m.resolved.template);
    if (name) args.push("--chat-template", name);
  }
  return args;
}
