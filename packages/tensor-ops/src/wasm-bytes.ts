// Node: the module built by scripts/build-wasm.mjs, read from the package root (src/ and dist/ are
// both one level below it). The browser build swaps this module for wasm-bytes.browser.ts.
import { readFileSync } from "node:fs";

export function wasmBytes(): Uint8Array {
  return readFileSync(new URL("../wasm/kernels.wasm", import.meta.url));
}
