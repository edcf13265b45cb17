import { GgmlType } from "@compat/gguf";
import { blocksWithTensors, joinQkv, TranslationError, u32Kv, type Translation } from "@compat/handlers";
import { split } from "@compat/tensor-ops";
import type { Bf16CpuUse } from "./tower";

/**
 * The Qwen3-VL-style tower work the reference shares between its qwen35/qwen35moe and
 * qwen3vl/qwen3vlmoe clip handlers: Ollama split the fused QKV and folded the Conv3D's
 * time axis into its channels; clip.cpp's qwen3vl_merger graph reads the fused
 * `attn_qkv` and two per-frame Conv2D kernels.
 */

/**
 * For each vision block with `attn_q`: `v.blk.N.attn_qkv.{weight,bias}` = q ‖ k ‖ v along
 * the rows, as llama.cpp's converter keeps the checkpoint's fused tensor (joinQkv). Same
 * types: the bytes are joined as they are (the reference's raw concat for Qwen 3.5). Mixed
 * types (published Qwen3-VL files hold F16 Q/K next to a Q8_0 V) cannot be joined as bytes,
 * so all three are widened to F32 first, the reference's rule for Qwen3-VL. The reference
 * widens Qwen3-VL's to F32 even when the types agree; the converter does not.
 */
export function mergeVisionQkv(t: Translation, blocks: number): void {
  for (const b of blocksWithTensors(t.draft, blocks, "v.blk.")) {
    if (t.draft.hasTensor(`v.blk.${b}.attn_q.weight`)) joinQkv(t, `v.blk.${b}.`, { mixed: "f32", what: "q+k+v" });
  }
}

/**
 * `v.patch_embed.weight` [P, P, T, C_out * C_in] (time folded into the channels: plane
 * (packed, t) at t + T * packed, packed = c_out * C_in + c_in) becomes
 * `v.patch_embd.weight` and `v.patch_embd.weight.1` [P, P, C_in, C_out], one per frame,
 * as llama.cpp's converter slices the Conv3D. Planes move whole, so the type stays (F16,
 * as the converter writes it for f16 output; the reference widens both to F32). Left as
 * it is, as by the reference, unless T == 2 and the channels divide the packed axis. The
 * reference splits an F16 source only (it refuses any other type, and clip.cpp then finds
 * no patch kernels); the planes move whole, so under `native` any type is split (the
 * named fix `<handler>-split-patch-embd-any-type`).
 */
export function splitPatchEmbedding(t: Translation, channels: number, handler: string): void {
  const src = t.draft.findTensor("v.patch_embed.weight");
  if (src === undefined || src.shape.length !== 4) return;
  const [w, h, frames, packed] = src.shape as [number, number, number, number];
  if (!(channels > 0) || frames !== 2 || packed % channels !== 0) return;
  let anyType = src.type === GgmlType.F16;
  t.fix({
    name: `${handler}-split-patch-embd-any-type`,
    reason:
      "the reference splits the folded Conv3D patch embedding (v.patch_embed.weight) into clip.cpp's two per-frame kernels only when it is F16; any other type (a BF16 tower) is left whole and clip.cpp finds no v.patch_embd.weight/.weight.1 it can run. The planes move whole, so any type splits; llama.cpp's converter slices every type",
    needed: () => !anyType,
    apply: () => {
      anyType = true;
    },
  });
  if (!anyType) return;
  const shape = [w, h, channels, packed / channels];
  const slices = [
    ["v.patch_embd.weight", 0],
    ["v.patch_embd.weight.1", 1],
  ] as const;
  for (const [dest, frame] of slices) {
    t.op(dest, {
      label: `patch embedding frame ${frame} of ${frames}`,
      inputs: ["v.patch_embed.weight"],
      type: src.type,
      shape,
      // viewed as [P*P, T, packed]: the split along T keeps each frame's planes in packed order
      compute: ([x]) => split({ data: x!.bytes, shape: [w * h, frames, packed] }, x!.type, 1, [1, 1])[frame]!.data,
    });
  }
  t.dropTensor("v.patch_embed.weight");
}

/**
 * `clip.vision.block_count`, which sizes the per-block `is_deepstack_layers` mask. A count
 * past the tower's last block is a damaged header, not a model (a fuzzed 2^32-1 asked for a
 * mask of four billion entries): a typed error instead of an allocation failure.
 */
export function visionBlockCount(t: Translation): number {
  const blocks = u32Kv(t.draft, "clip.vision.block_count") ?? 0;
  const present = blocksWithTensors(t.draft, blocks, "v.blk.");
  const end = present.length > 0 ? present[present.length - 1]! + 1 : 0;
  if (blocks > end) {
    throw new TranslationError("BAD_COUNT", `clip.vision.block_count is ${blocks} but the vision tower's blocks end at v.blk.${end - 1}`);
  }
  return blocks;
}

/** The Qwen3-VL tower tensors clip.cpp cannot run in BF16 on the CPU backend (see widenBf16ForCpu). */
export const QWEN_BF16_ON_CPU: Readonly<Record<string, Bf16CpuUse>> = {
  "v.patch_embd.weight": "conv",
  "v.patch_embd.weight.1": "conv",
  "v.position_embd.weight": "interpolate",
};
