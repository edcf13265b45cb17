import type { Handler } from "../handler";
import { qwen3vlHandler } from "./qwen3vl";

/** Qwen3-VL MoE: the same two missing keys as the dense model (see qwen3vl.ts). */
export const qwen3vlmoe: Handler = qwen3vlHandler("qwen3vlmoe");
