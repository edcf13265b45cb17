/** The browser build inlines .wasm files as bytes (tsup.config.ts, esbuild's binary loader). */
declare module "*.wasm" {
  const bytes: Uint8Array;
  export default bytes;
}
