import type { Handler } from "../handler";
import { applyQwen35TextFixes, detectQwen35 } from "./qwen35-family";

/**
 * Qwen 3.5 dense (e.g. qwen3.5:9b) as Ollama's converter wrote it: see qwen35-family.
 * Unlike qwen35moe, feed_forward_length is no marker here (llama.cpp writes it too).
 */
export const qwen35: Handler = {
  name: "qwen35",
  arch: "qwen35",
  detect: (m) => detectQwen35(m, "qwen35"),
  apply: (t) => applyQwen35TextFixes(t, "qwen35"),
};
