import { GgufValueType } from "@compat/gguf";
import type { Handler } from "../handler";
import { intArrayKv } from "../reads";

/**
 * Qwen2.5-VL as Ollama wrote it: llama.cpp loads it as qwen2vl, which reads its
 * M-RoPE split from a 4-item rope.dimension_sections where Ollama stored a 3-item
 * rope.mrope_section. The vision tower rides along in the same file and is hidden.
 */
export const qwen25vl: Handler = {
  name: "qwen25vl",
  arch: "qwen25vl",
  // the architecture name itself is the marker: llama.cpp has no "qwen25vl"
  detect: () => ["architecture qwen25vl"],
  apply(t) {
    t.renameArch("qwen25vl", "qwen2vl");
    const sections = intArrayKv(t.draft, "qwen2vl.rope.mrope_section");
    if (sections !== undefined && sections.length >= 3) {
      t.setArray("qwen2vl.rope.dimension_sections", GgufValueType.INT32, [sections[0]!, sections[1]!, sections[2]!, 0]);
    }
    t.hide("v.");
    t.hide("mm.");
  },
};
