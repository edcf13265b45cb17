// Browser: the module is inlined into the bundle at build time (esbuild's binary loader), so it loads
// without a fetch, from any bundler or CDN.
import bytes from "../wasm/kernels.wasm";

export function wasmBytes(): Uint8Array {
  return bytes;
}
