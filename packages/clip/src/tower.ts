import { anyOf, hasTensorPrefix, type Translation } from "@compat/handlers";
import { GgmlType, type GgufModel } from "@compat/gguf";
import { toF32 } from "@compat/tensor-ops";

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

/**
 * How stock clip.cpp uses a tower tensor that llama.cpp's CPU backend cannot take in BF16
 * (seen in llama-mtmd-cli, x86-64-v3 build; ggml-cpu.cpp supports_op, binary-ops.cpp, ggml.c):
 * - `conv`: a ggml_conv_2d kernel. For a BF16 kernel ggml makes the im2col rows F32, and
 *   the CPU backend's mul_mat takes F32 rows only against an F32 or F32-dot-type weight, so
 *   no backend runs the node: GGML_ASSERT(*cur_backend_id != -1) in the scheduler.
 * - `add`: added to the F32 activations (position embeddings); the CPU add has no
 *   F32 + BF16 -> F32 kernel: GGML_ABORT "unsupported types".
 * - `interpolate`: resized to the image's patch grid by ggml_interpolate, which asserts an
 *   F32 input: GGML_ASSERT(a->type == GGML_TYPE_F32).
 */
export type Bf16CpuUse = "conv" | "add" | "interpolate";

const BF16_CPU_FAILURE: Readonly<Record<Bf16CpuUse, string>> = {
  conv: "a conv2d kernel: the CPU backend has no mul_mat of F32 im2col rows by a BF16 kernel, GGML_ASSERT(*cur_backend_id != -1)",
  add: "added to F32 activations: the CPU backend has no F32 + BF16 add, GGML_ABORT unsupported types",
  interpolate: "resized by ggml_interpolate, which asserts an F32 input",
};

/**
 * The named fix `<handler>-bf16-to-f32`: of `tensors` (final names, with how clip.cpp uses
 * each), those stored BF16 become F32 under the native profile, which is exact; llama-mtmd-cli
 * aborts on them otherwise, with the reference's output as with the tower as it is (the
 * reference promotes F16 only). llama.cpp's converter writes them F32 for any output type but
 * F16. Ollama wrote BF16 towers from Aug to Sep 2025 (convert/reader_safetensors.go kept a
 * BF16 checkpoint's v.* BF16 from fa7776fd2 until 2717dce6f). Call after the renames.
 */
export function widenBf16ForCpu(t: Translation, handler: string, tensors: Readonly<Record<string, Bf16CpuUse>>): void {
  const bf16 = Object.keys(tensors).filter((n) => t.draft.findTensor(n)?.type === GgmlType.BF16);
  t.fix({
    name: `${handler}-bf16-to-f32`,
    reason: `stock clip.cpp cannot run these BF16 tensors on llama.cpp's CPU backend (llama-mtmd-cli aborts): ${bf16
      .map((n) => `${n}, ${BF16_CPU_FAILURE[tensors[n]!]}`)
      .join("; ")}. BF16 to F32 is exact; llama.cpp's converter writes them F32 for any output type but F16`,
    needed: () => bf16.length > 0,
    apply: () => {
      for (const name of bf16) {
        const shape = t.draft.findTensor(name)!.shape.slice();
        const n = shape.reduce((a, b) => a * b, 1);
        t.op(name, {
          label: "BF16->F32 widen",
          inputs: [name],
          type: GgmlType.F32,
          shape,
          compute: ([x]) => {
            const f = toF32(x!.type, x!.bytes, n);
            return new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
          },
        });
      }
    },
  });
}
