import { GgufValueType, type GgufModel } from "@compat/gguf";
import type { Handler } from "../handler";
import type { Translation } from "../translation";

/**
 * The M-RoPE split the reference writes for every Qwen3-VL file: Qwen3-VL's own
 * mrope_section for head_dim 128. It is wrong for other head sizes, and below 64
 * ggml's rope aborts (kept for equivalence; see docs/reference/findings.md).
 */
export const QWEN3VL_REFERENCE_SECTIONS: readonly number[] = [24, 20, 20, 0];

/**
 * Qwen3-VL text side (dense "qwen3vl", MoE "qwen3vlmoe" share it) as Ollama wrote it:
 * no M-RoPE sections (llama.cpp requires them) and no DeepStack layer count. The
 * missing sections key is the marker: llama.cpp's converter always writes it.
 */
export function qwen3vlHandler(arch: "qwen3vl" | "qwen3vlmoe"): Handler {
  const sectionsKey = `${arch}.rope.dimension_sections`;
  return {
    name: arch,
    arch,
    detect: (m: GgufModel) => (m.has(sectionsKey) ? null : [`no ${sectionsKey}`]),
    apply(t: Translation) {
      t.setArray(sectionsKey, GgufValueType.INT32, QWEN3VL_REFERENCE_SECTIONS);
      const indexes = `${arch}.vision.deepstack_visual_indexes`;
      const count = t.getArray(indexes)?.values.length ?? 0;
      t.injectU32(`${arch}.n_deepstack_layers`, count);
      t.hide("v.");
      t.hide("mm.");
    },
  };
}

export const qwen3vl: Handler = qwen3vlHandler("qwen3vl");
