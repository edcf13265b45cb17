import type { Plugin } from "esbuild";
import { fileURLToPath } from "node:url";
import { packageBuild } from "../../tsup.package";

const browserLoader = fileURLToPath(new URL("./src/native-loader.browser.ts", import.meta.url));
const browserWasmBytes = fileURLToPath(new URL("./src/wasm-bytes.browser.ts", import.meta.url));

/**
 * The browser build (package.json "browser" condition) has no addon loader, and carries the WASM
 * kernels inline instead of reading wasm/kernels.wasm from disk.
 */
const browserModules: Plugin = {
  name: "browser-modules",
  setup(build) {
    build.onResolve({ filter: /^\.\/native-loader$/ }, () => ({ path: browserLoader }));
    build.onResolve({ filter: /^\.\/wasm-bytes$/ }, () => ({ path: browserWasmBytes }));
  },
};

export default [
  // import.meta.url (used to locate the native addon) also works in the CJS build.
  packageBuild({ shims: true }),
  packageBuild({
    format: ["esm"],
    outDir: "dist/browser",
    platform: "browser",
    target: "es2022",
    dts: false,
    splitting: false,
    clean: false,
    sourcemap: false,
    loader: { ".wasm": "binary" },
    esbuildPlugins: [browserModules],
  }),
];
