import type { Handler } from "../handler";
import { applyQwen35TextFixes, detectQwen35 } from "./qwen35-family";

/**
 * Qwen 3.5 MoE (e.g. qwen3.5:35b-a3b) as Ollama's converter wrote it: see qwen35-family.
 * Its MTP layer's experts come one tensor per expert and are stacked here.
 */
export const qwen35moe: Handler = {
  name: "qwen35moe",
  arch: "qwen35moe",
  // llama.cpp's converter writes no feed_forward_length for the MoE (the config has none); Ollama always did.
  detect: (m) => detectQwen35(m, "qwen35moe", ["qwen35moe.feed_forward_length"]),
  apply: (t) => applyQwen35TextFixes(t, "qwen35moe"),
};
