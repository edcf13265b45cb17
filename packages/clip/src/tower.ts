import { anyOf, hasTensorPrefix, type Translation } from "@compat/handlers";
import type { GgufModel } from "@compat/gguf";

/** Tensor prefixes of an mmproj: vision tower, projector, audio tower. */
export const MMPROJ_TENSOR_PREFIXES: readonly string[] = Object.freeze(["v.", "mm.", "a."]);

/** Metadata an mmproj carries; the text model's keys (tokenizer, <arch>.*) stay with the text file. */
export const MMPROJ_KEY_PREFIXES: readonly string[] = Object.freeze(["general.", "clip."]);

/**
 * The detector every tower handler starts from. As in the reference's clip dispatch,
 * only files with vision tensors (`v.*`) get a clip view; the text detectors of these
 * architectures all fire on such files, so the vision tower is the marker.
 */
export function embeddedVision(m: GgufModel): string[] | null {
  if (!hasTensorPrefix(m, "v.")) return null;
  return anyOf(
    "embedded vision tensors v.*",
    hasTensorPrefix(m, "mm.") && "embedded projector tensors mm.*",
    hasTensorPrefix(m, "a.") && "embedded audio tensors a.*",
  );
}

/**
 * The last step of every tower handler: the file becomes a clip model holding only the
 * tower's tensors and the general./clip. keys. (A separate projector blob is already
 * one, which is why the LLaVA default does not call this.)
 */
export function asMmproj(t: Translation): void {
  t.setArch("clip");
  t.keepOnly(MMPROJ_TENSOR_PREFIXES);
  t.keepKeysOnly(MMPROJ_KEY_PREFIXES);
}
