/**
 * WebAssembly SIMD kernels (wasm/kernels.c), the second tier after the native addon and before JS.
 * They give bit-identical output to the JS kernels and run wherever WebAssembly SIMD does: Node
 * without the addon, browsers, workers. Node compiles the module synchronously on first use; where
 * synchronous compilation is refused (some browsers cap its size on the main thread) the module
 * compiles in the background, JS kernels run meanwhile, and `initWasm()` resolves once it is ready.
 */
import { GgmlType as T } from "@compat/gguf";
import { wasmBytes } from "./wasm-bytes";

interface KernelExports {
  memory: WebAssembly.Memory;
  __heap_base: WebAssembly.Global;
  [kernel: string]: unknown;
}

type Kernel = (src: number, dst: number, n: number) => void;

/** ggml type -> [export name, block bytes, values per block]. F16/BF16 count single values. */
const KERNELS = new Map<number, [string, number, number]>([
  [T.F16, ["f16", 2, 1]],
  [T.BF16, ["bf16", 2, 1]],
  [T.Q8_0, ["q8_0", 34, 32]],
  [T.Q4_K, ["q4_k", 144, 256]],
  [T.Q6_K, ["q6_k", 210, 256]],
  [T.MXFP4, ["mxfp4", 17, 32]],
  [T.Q4_0, ["q4_0", 18, 32]],
  [T.Q4_1, ["q4_1", 20, 32]],
  [T.Q5_0, ["q5_0", 22, 32]],
  [T.Q5_1, ["q5_1", 24, 32]],
  [T.Q5_K, ["q5_k", 176, 256]],
  [T.IQ4_NL, ["iq4_nl", 18, 32]],
  [T.IQ4_XS, ["iq4_xs", 136, 256]],
]);

/** Source bytes per call: small enough to stay in cache, large enough to amortize the call. */
const CHUNK_BYTES = 256 * 1024;

/** The loaded module, as the converter uses it. */
export interface WasmKernels {
  /** Converts `nBlocks` blocks of ggml `type`; returns false when there is no WASM kernel for it. */
  toF32(type: number, src: Uint8Array, dst: Float32Array, nBlocks: number): boolean;
  /** ggml type numbers with a WASM kernel. */
  types(): number[];
}

let state: WasmKernels | null | undefined;
let pending: Promise<WasmKernels | null> | undefined;
let loadError: unknown;

function kernelsFrom(instance: WebAssembly.Instance): WasmKernels {
  const exports = instance.exports as unknown as KernelExports;
  const memory = exports.memory;
  const base = ((exports.__heap_base.value as number) + 15) & ~15;
  // The largest chunk of any kernel: source bytes, then its f32 output, both 16-byte aligned.
  let maxDst = 0;
  for (const [, bytes, size] of KERNELS.values()) maxDst = Math.max(maxDst, Math.floor(CHUNK_BYTES / bytes) * size * 4);
  const srcPtr = base;
  const dstPtr = base + CHUNK_BYTES;
  const needed = dstPtr + maxDst;
  if (memory.buffer.byteLength < needed) memory.grow(Math.ceil((needed - memory.buffer.byteLength) / 65536));
  const heap = memory.buffer; // fixed from here on: nothing grows the memory again
  return {
    toF32(type, src, dst, nBlocks) {
      const entry = KERNELS.get(type);
      if (!entry) return false;
      const [name, blockBytes, blockSize] = entry;
      const fn = exports[name] as Kernel;
      const perChunk = Math.floor(CHUNK_BYTES / blockBytes);
      const srcView = new Uint8Array(heap, srcPtr, CHUNK_BYTES);
      for (let done = 0; done < nBlocks; ) {
        const n = Math.min(perChunk, nBlocks - done);
        srcView.set(src.subarray(done * blockBytes, (done + n) * blockBytes));
        fn(srcPtr, dstPtr, n);
        dst.set(new Float32Array(heap, dstPtr, n * blockSize), done * blockSize);
        done += n;
      }
      return true;
    },
    types: () => [...KERNELS.keys()],
  };
}

function bytesOrThrow(): Uint8Array {
  const bytes = wasmBytes();
  if (bytes.byteLength === 0) throw new Error("the WASM kernels were not built (scripts/build-wasm.mjs needs clang and lld)");
  if (typeof WebAssembly === "undefined") throw new Error("WebAssembly is not available");
  return bytes;
}

/** The WASM kernels when loaded, null when they cannot be (see `wasmLoadError`), undefined while compiling. */
export function wasmKernels(): WasmKernels | null | undefined {
  if (state !== undefined) return state;
  if (pending) return undefined;
  let bytes: Uint8Array;
  try {
    bytes = bytesOrThrow();
  } catch (error) {
    loadError = error;
    return (state = null);
  }
  try {
    return (state = kernelsFrom(new WebAssembly.Instance(new WebAssembly.Module(bytes as BufferSource), {})));
  } catch (syncError) {
    // Browser main thread: compile asynchronously instead (any other failure shows up there again).
    pending = WebAssembly.instantiate(bytes as BufferSource, {}).then(
      (result) => (state = kernelsFrom(result.instance)),
      (error: unknown) => {
        loadError = error ?? syncError;
        return (state = null);
      },
    );
    return undefined;
  }
}

/** Resolves once the WASM kernels are ready (true) or known to be unavailable (false). */
export async function initWasm(): Promise<boolean> {
  const now = wasmKernels();
  if (now !== undefined) return now !== null;
  return (await (pending as Promise<WasmKernels | null>)) !== null;
}

/** Why the WASM kernels could not be loaded, if they could not. */
export function wasmLoadError(): string | undefined {
  return loadError === undefined ? undefined : String(loadError);
}

/** Forgets a failed or earlier load so a freshly built module is picked up (used by tests). */
export function reloadWasm(): void {
  state = undefined;
  pending = undefined;
  loadError = undefined;
}
