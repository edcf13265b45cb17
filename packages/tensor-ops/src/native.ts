/**
 * Optional native kernels (an N-API addon built by `npm run build:native`), then WebAssembly SIMD
 * kernels (src/wasm.ts), then JS: each conversion uses the first tier that has a kernel for the type,
 * and all three produce bit-identical output. COMPAT_TENSOR_OPS=wasm skips the addon,
 * COMPAT_TENSOR_OPS=js skips both.
 */
import type { KernelCopy } from "@compat/files";
import { loadNativeAddon } from "./native-loader";
import { initWasm, wasmKernels, wasmLoadError, type WasmKernels } from "./wasm";

export type Backend = "native" | "wasm" | "js";

/** What `setBackend` accepts: a tier to force, or "auto" for the fastest available. */
export type BackendChoice = "native" | "wasm" | "js" | "auto";

/** Shape of the addon's exports (native/tensor_ops.c). */
export interface NativeAddon {
  /** Converts `nBlocks` blocks of ggml `type`; returns false when the addon has no kernel for it. */
  toF32(type: number, src: Uint8Array, dst: Float32Array, nBlocks: number): boolean;
  /** ggml type numbers the addon accelerates. */
  types(): number[];
  /** Which instruction set the addon picked at load ("avx2+f16c" or "scalar"). */
  isa(): string;
  /** Restricts the addon to its portable scalar kernels ("scalar") or lets it pick ("auto"). */
  setIsa(choice: "scalar" | "auto"): string;
  /** copy_file_range loop: bytes copied, or -errno when refused before the first byte (absent in older builds). */
  copyFileRange?(fdIn: number, offIn: number, fdOut: number, offOut: number, length: number): number;
  /** copyFileRange on libuv's thread pool: the event loop runs meanwhile (absent in older builds). */
  copyFileRangeAsync?(fdIn: number, offIn: number, fdOut: number, offOut: number, length: number): Promise<number>;
  /** FICLONERANGE: 0 or -errno (absent in older builds). */
  cloneRange?(fdIn: number, offIn: number, fdOut: number, offOut: number, length: number): number;
  /** Bilinear align-corners position-grid resample, bit-identical to the JS kernel (absent in older builds). */
  resampleGrid?(src: Float32Array, dst: Float32Array, embedding: number, srcHeight: number, srcWidth: number, dstHeight: number, dstWidth: number): boolean;
  /** A zero-filled buffer of `bytes` backed by transparent huge pages where the kernel can, else null (absent in older builds). */
  largeBuffer?(bytes: number): ArrayBuffer | null;
  /** @compat/gguf's short-string walk (little-endian), position and item into out[0], out[1] (absent in older builds). */
  walkShortStrings?(bytes: Uint8Array, q: number, i: number, n: number, stop: number, out: Float64Array): void;
}

let loaded: NativeAddon | null | undefined;
let loadError: unknown;
let forced: BackendChoice = readEnvForce();

function readEnvForce(): BackendChoice {
  const value = typeof process !== "undefined" ? process.env?.COMPAT_TENSOR_OPS : undefined;
  return value === "js" || value === "wasm" ? value : "auto";
}

function loadAddon(): NativeAddon | null {
  if (loaded !== undefined) return loaded;
  loaded = null;
  try {
    loaded = loadNativeAddon<NativeAddon>();
  } catch (error) {
    loadError = error;
  }
  return loaded;
}

/** The addon when it is loaded and not disabled, otherwise undefined. */
export function nativeAddon(): NativeAddon | undefined {
  if (forced === "js" || forced === "wasm") return undefined;
  return loadAddon() ?? undefined;
}

/**
 * The addon's in-kernel file range copy (copy_file_range), for @compat/files' kernelRangeCopier,
 * which runs the copy loop around it: `kernelRangeCopier(nativeFileCopy())` is the RangeCopier
 * for @compat/gguf's WriteOptions.copyRange. Undefined without the addon (or when it is disabled).
 * The copy runs on libuv's thread pool where the addon can (the synchronous call of an older
 * build otherwise): copying a GiB into the page cache takes a core for a third of a second, and
 * on the event loop's thread it kept everything else a write does waiting (another output's
 * copy, the flushes behind it, computed tensors).
 */
export function nativeFileCopy(): KernelCopy | undefined {
  const addon = nativeAddon();
  return addon?.copyFileRangeAsync ?? addon?.copyFileRange;
}

/**
 * The addon's walk over a string array's short items, for @compat/gguf's ReadOptions.walkStrings
 * (the same steps as the parser's own walk, compiled: a cold process walks a 262,144-token
 * vocabulary interpreted in about 10 ms). Undefined without the addon or when it is disabled.
 */
export function nativeStringWalk(): NativeAddon["walkShortStrings"] {
  const addon = nativeAddon();
  return addon?.walkShortStrings;
}

/**
 * Shares `length` bytes of one file with another (FICLONERANGE reflink: Btrfs, XFS). Returns
 * 0 on success or a negative errno (ext4 and tmpfs refuse with EOPNOTSUPP or EXDEV/EINVAL).
 * Offsets and length must be multiples of the filesystem block size.
 */
export function cloneFileRange(srcFd: number, srcOffset: number, dstFd: number, dstOffset: number, length: number): number {
  const clone = nativeAddon()?.cloneRange;
  return clone === undefined ? -95 : clone(srcFd, srcOffset, dstFd, dstOffset, length);
}

/**
 * From this size on, largeBytes asks the addon for memory of its own (a huge page is 2 MiB, so a
 * 1 MiB buffer may take twice its size). Measured on the bench machine: a fresh 1.3 MB buffer
 * costs 5-7 ms in 4 KiB pages (320 faults) and 0.3 ms in a huge page; a header read holds
 * three or four such buffers.
 */
const LARGE_BYTES = 1024 * 1024;

/**
 * A zero-filled Uint8Array of `length` bytes for a buffer that is written in full right away (a
 * computed tensor, an op's input read whole). Large ones come from the addon, in transparent huge
 * pages where the kernel gives them: the first touch of every 4 KiB page is a page fault, and
 * where the host shadows the guest's page tables (this project's bench machine) 38 MiB of fresh
 * pages cost 0.1 s against 3 ms in huge pages. Without the addon, a plain Uint8Array.
 */
export function largeBytes(length: number): Uint8Array {
  if (length >= LARGE_BYTES) {
    const buffer = nativeAddon()?.largeBuffer?.(length);
    if (buffer != null) return new Uint8Array(buffer);
  }
  return new Uint8Array(length);
}

/**
 * `length` zero-filled bytes in memory of their own starting on a 2 MiB boundary (so on any
 * 4096-byte one), as O_DIRECT wants its buffers (@compat/files' writeFileAtomic takes it as
 * `alignedBytes`): the addon's huge-page mapping. Undefined without the addon: a Uint8Array's
 * own memory comes from malloc, whose address JavaScript cannot see.
 */
export function alignedBytes(length: number): Uint8Array | undefined {
  const buffer = nativeAddon()?.largeBuffer?.(length);
  return buffer != null ? new Uint8Array(buffer) : undefined;
}

/** The WASM kernels when they are loaded and not disabled, otherwise undefined. */
export function wasmTier(): WasmKernels | undefined {
  if (forced === "js") return undefined;
  return wasmKernels() ?? undefined;
}

/**
 * The fastest tier in use: "native" (the addon), "wasm" (WebAssembly SIMD) or "js". Types the active
 * tier has no kernel for fall through to the next one.
 */
export function activeBackend(): Backend {
  if (nativeAddon()) return "native";
  return wasmTier() ? "wasm" : "js";
}

/**
 * Waits until the WASM kernels are compiled where that happens in the background (browser main
 * threads), then returns the active backend. Never needed for correctness: conversions use the JS
 * kernels until then.
 */
export async function ready(): Promise<Backend> {
  await initWasm();
  return activeBackend();
}

/** Whether the addon could be loaded at all (regardless of forcing JS). */
export function nativeAvailable(): boolean {
  return loadAddon() !== null;
}

/**
 * Selects the backend: "js" forces the JS kernels, "wasm" skips the addon (WASM, then JS), "native"
 * and "auto" use the fastest available. Returns the backend now active.
 */
export function setBackend(choice: BackendChoice): Backend {
  forced = choice === "native" ? "auto" : choice;
  return activeBackend();
}

/** Diagnostics for the bench and error reports. */
export function backendInfo(): {
  backend: Backend;
  forcedJs: boolean;
  forced: BackendChoice;
  isa?: string;
  nativeTypes: number[];
  wasmTypes: number[];
  loadError?: string;
  wasmLoadError?: string;
} {
  const addon = loadAddon();
  const wasm = wasmKernels();
  const wasmError = wasmLoadError();
  return {
    backend: activeBackend(),
    forcedJs: forced === "js",
    forced,
    ...(addon ? { isa: addon.isa() } : {}),
    nativeTypes: addon ? addon.types() : [],
    wasmTypes: wasm ? wasm.types() : [],
    ...(addon || loadError === undefined ? {} : { loadError: String(loadError) }),
    ...(wasmError === undefined ? {} : { wasmLoadError: wasmError }),
  };
}

/** Forgets a failed or earlier load so a freshly built addon is picked up (used by tests). */
export function reloadNative(): boolean {
  loaded = undefined;
  loadError = undefined;
  return loadAddon() !== null;
}
