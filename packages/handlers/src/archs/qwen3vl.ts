import { GgufValueType, type GgufModel } from "@compat/gguf";
import type { Handler } from "../handler";
import type { Translation } from "../translation";
import { arrayKv, intArrayKv, u32Kv } from "../reads";

/**
 * The M-RoPE split the reference writes for every Qwen3-VL file: Qwen3-VL's own
 * mrope_section for head_dim 128. It is wrong for other head sizes, and below 64
 * ggml's rope aborts (kept by `reference`; `native` derives them, see below).
 */
const QWEN3VL_REFERENCE_SECTIONS: readonly number[] = [24, 20, 20, 0];

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
      const count = arrayKv(t.draft, indexes)?.length ?? 0;
      t.injectU32(`${arch}.n_deepstack_layers`, count);
      t.hide("v.");
      t.hide("mm.");

      const derived = derivedSections(t, arch);
      t.fix({
        name: `${arch}-rope-sections`,
        reason:
          "the reference writes Qwen3-VL's M-RoPE sections for head_dim 128 ([24, 20, 20, 0]) whatever the head size, which aborts llama.cpp's rope below head_dim 64; Ollama's converter wrote no sections, llama.cpp's converter writes the config's, so they are taken from the file's own mrope_section or scaled to its head size",
        needed: () => derived !== undefined && !sameInts(intArrayKv(t.draft, sectionsKey), derived),
        apply: () => t.setArray(sectionsKey, GgufValueType.INT32, derived!),
      });
    },
  };
}

/**
 * The sections llama.cpp's converter would write: the file's own 3-item mrope_section
 * when Ollama copied one, else Qwen3-VL's split ([24, 20, 20] of 64 rotary pairs)
 * scaled to half the head size, read from key_length or the per-head q_norm.
 */
function derivedSections(t: Translation, arch: string): number[] | undefined {
  const own = intArrayKv(t.draft, `${arch}.rope.mrope_section`);
  if (own !== undefined && own.length === 3) return [...own, 0];
  const head = u32Kv(t.draft, `${arch}.attention.key_length`) ?? t.draft.findTensor("blk.0.attn_q_norm.weight")?.shape[0];
  if (head === undefined || head < 2 || head % 2 !== 0) return undefined;
  const pairs = head / 2;
  const hw = Math.floor((pairs * 5) / 16);
  return [pairs - 2 * hw, hw, hw, 0];
}

function sameInts(a: readonly number[] | undefined, b: readonly number[]): boolean {
  return a !== undefined && a.length === b.length && a.every((x, i) => x === b[i]);
}

export const qwen3vl: Handler = qwen3vlHandler("qwen3vl");
