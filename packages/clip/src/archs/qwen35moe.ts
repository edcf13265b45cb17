import type { Handler } from "@compat/handlers";
import { embeddedVision } from "../tower";
import { applyQwen35Clip } from "./qwen35-family";

/** Qwen 3.5 MoE (e.g. qwen3.5:35b-a3b): see qwen35-family. */
export const qwen35moeClip: Handler = {
  name: "qwen35moe-clip",
  arch: "qwen35moe",
  detect: embeddedVision,
  apply: (t) => applyQwen35Clip(t, "qwen35moe"),
};
