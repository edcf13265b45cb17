import { deepseekocr } from "./archs/deepseekocr";
import { embeddinggemma } from "./archs/embeddinggemma";
import { gemma3 } from "./archs/gemma3";
import { gemma3n } from "./archs/gemma3n";
import { gemma4 } from "./archs/gemma4";
import { glm4moelite } from "./archs/glm4moelite";
import { glmocr } from "./archs/glmocr";
import { gptoss } from "./archs/gptoss";
import { laguna } from "./archs/laguna";
import { lfm2 } from "./archs/lfm2";
import { llama3 } from "./archs/llama3";
import { llama4 } from "./archs/llama4";
import { mistral3 } from "./archs/mistral3";
import { nemotronHMoe } from "./archs/nemotron-h-moe";
import { nemotronHOmni } from "./archs/nemotron-h-omni";
import { olmo3 } from "./archs/olmo3";
import { qwen35 } from "./archs/qwen35";
import { qwen35moe } from "./archs/qwen35moe";
import { qwen25vl } from "./archs/qwen25vl";
import { qwen3next } from "./archs/qwen3next";
import { qwen3vl } from "./archs/qwen3vl";
import { qwen3vlmoe } from "./archs/qwen3vlmoe";
import { snowflakeArcticEmbed2 } from "./archs/snowflake-arctic-embed2";
import type { Handler } from "./handler";

/**
 * Text-side handlers in the reference's dispatch order (Ollama's translate_metadata).
 * Each is gated on the architecture as earlier handlers left it, so an arch-renaming
 * handler (embeddinggemma, gptoss, olmo3, qwen25vl, glm4moelite, deepseekocr,
 * nemotron_h_omni) must stand before anything that gates on its new name.
 */
export const textHandlers: readonly Handler[] = Object.freeze([
  embeddinggemma, //  gemma3 -> gemma-embedding; must precede gemma3
  gemma3,
  snowflakeArcticEmbed2, // bert
  gemma3n,
  gemma4,
  qwen35moe,
  qwen35,
  qwen3next,
  laguna,
  gptoss, // gptoss -> gpt-oss
  lfm2,
  olmo3, // olmo3 -> olmo2
  mistral3,
  qwen25vl, // qwen25vl -> qwen2vl
  qwen3vl,
  qwen3vlmoe,
  glm4moelite, // glm4moelite -> deepseek2
  deepseekocr, // deepseekocr -> deepseek2-ocr
  nemotronHOmni, // nemotron_h_omni -> nemotron_h_moe | nemotron_h; must precede nemotronHMoe
  nemotronHMoe,
  llama3, // llama
  llama4,
  glmocr, // glmocr -> glm4
]);
