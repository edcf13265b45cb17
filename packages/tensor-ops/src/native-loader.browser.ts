// Browser: there is no N-API addon; the JS kernels (bit-identical) run.
export function loadNativeAddon<T>(): T {
  throw new Error("native kernels are not available in a browser");
}
