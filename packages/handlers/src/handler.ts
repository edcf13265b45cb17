import type { GgufModel } from "@compat/gguf";
import type { Translation } from "./translation";

/**
 * One architecture's translation, in the shape of the reference's handle_<arch>:
 * a gate on the current architecture name, a detector that names the Ollama quirks
 * it found, and an apply step built from the Translation verbs.
 */
export interface Handler {
  /** Stable id shown in reports, e.g. "gemma3" or "llama3-metadata". */
  readonly name: string;
  /** The `general.architecture` value(s) this handler is gated on, checked against the
   * current (possibly already renamed) architecture. */
  readonly arch: string | readonly string[];
  /** Markers proving an Ollama-format file (non-empty), or null when the file is not one. Pure.
   * Called only when `arch` gates on, so it does not test the architecture again. */
  detect(model: GgufModel): string[] | null;
  /** Rewrite the draft. Never touches the file system. */
  apply(t: Translation): void;
  /**
   * Optional, for files `detect` passes over (the reference leaves them as they are) that
   * still carry a known reference gap: markers of an Ollama file with that gap, or null. Pure.
   */
  detectGaps?(model: GgufModel): string[] | null;
  /** With detectGaps: only the handler's t.fix calls, run when detectGaps matched. */
  applyFixes?(t: Translation): void;
}

export function gatesOn(handler: Handler, arch: string): boolean {
  return typeof handler.arch === "string" ? handler.arch === arch : handler.arch.includes(arch);
}
