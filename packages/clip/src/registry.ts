import type { Handler } from "@compat/handlers";
import { deepseekocrClip } from "./archs/deepseekocr";
import { gemma3Clip } from "./archs/gemma3";
import { gemma4Clip } from "./archs/gemma4";
import { glmocrClip } from "./archs/glmocr";
import { llama4Clip } from "./archs/llama4";
import { llavaProjectorDefault } from "./archs/llava";
import { mistral3Clip } from "./archs/mistral3";
import { nemotronHOmniClip } from "./archs/nemotron-h-omni";
import { qwen25vlClip } from "./archs/qwen25vl";
import { qwen35Clip } from "./archs/qwen35";
import { qwen35moeClip } from "./archs/qwen35moe";
import { qwen3vlClip } from "./archs/qwen3vl";

/**
 * Clip-side handlers in the reference's clip dispatch order (Ollama's
 * translate_clip_metadata). The LLaVA default comes first and is the only one gated on
 * `clip`; every other handler is gated on a text architecture and ends by renaming it
 * to `clip`, so at most one of them runs per file (the reference's "first match wins").
 * Adding an architecture: packages/clip/src/archs/<arch>.ts plus one line here.
 */
export const clipHandlers: readonly Handler[] = Object.freeze([
  llavaProjectorDefault,
  gemma3Clip,
  qwen35moeClip,
  qwen35Clip,
  mistral3Clip,
  deepseekocrClip,
  nemotronHOmniClip,
  llama4Clip,
  gemma4Clip,
  glmocrClip,
  qwen25vlClip,
  qwen3vlClip,
]);
