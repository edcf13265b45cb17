/**
 * Optional native kernels (an N-API addon built by `npm run build:native`). When the addon is
 * missing, fails to load, or COMPAT_TENSOR_OPS=js is set, every conversion uses the JS kernels,
 * which produce bit-identical output.
 */
import { loadNativeAddon } from "./native-loader";

export type Backend = "native" | "js";

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
  /** FICLONERANGE: 0 or -errno (absent in older builds). */
  cloneRange?(fdIn: number, offIn: number, fdOut: number, offOut: number, length: number): number;
}

let loaded: NativeAddon | null | undefined;
let loadError: unknown;
let forcedJs = readEnvForce();

function readEnvForce(): boolean {
  const value = typeof process !== "undefined" ? process.env?.COMPAT_TENSOR_OPS : undefined;
  return value === "js";
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
  if (forcedJs) return undefined;
  return loadAddon() ?? undefined;
}

/** "native" when conversions go through the addon, "js" otherwise. */
export function activeBackend(): Backend {
  return nativeAddon() ? "native" : "js";
}

/** Whether the addon could be loaded at all (regardless of forcing JS). */
export function nativeAvailable(): boolean {
  return loadAddon() !== null;
}

/**
 * Selects the backend: "js" forces the JS kernels, "auto" uses the addon when it is available.
 * Returns the backend now active.
 */
export function setBackend(choice: "js" | "auto"): Backend {
  forcedJs = choice === "js";
  return activeBackend();
}

/** Diagnostics for the bench and error reports. */
export function backendInfo(): { backend: Backend; forcedJs: boolean; isa?: string; nativeTypes: number[]; loadError?: string } {
  const addon = loadAddon();
  return {
    backend: activeBackend(),
    forcedJs,
    ...(addon ? { isa: addon.isa() } : {}),
    nativeTypes: addon ? addon.types() : [],
    ...(addon || loadError === undefined ? {} : { loadError: String(loadError) }),
  };
}

/** Forgets a failed or earlier load so a freshly built addon is picked up (used by tests). */
export function reloadNative(): boolean {
  loaded = undefined;
  loadError = undefined;
  return loadAddon() !== null;
}
