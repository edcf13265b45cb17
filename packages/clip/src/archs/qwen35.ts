import type { Handler } from "@compat/handlers";
import { embeddedVision } from "../tower";
import { applyQwen35Clip } from "./qwen35-family";

/** Qwen 3.5 dense (e.g. qwen3.5:9b): see qwen35-family. */
export const qwen35Clip: Handler = {
  name: "qwen35-clip",
  arch: "qwen35",
  detect: embeddedVision,
  apply: (t) => applyQwen35Clip(t, "qwen35"),
};
