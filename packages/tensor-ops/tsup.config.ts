import { fileURLToPath } from "node:url";
import { browserBuild, packageBuild } from "../../tsup.package";

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default [
  // import.meta.url (used to locate the native addon) also works in the CJS build.
  packageBuild({ shims: true }),
  // The browser build (package.json "browser" condition) has no addon loader, and carries the
  // WASM kernels inline instead of reading wasm/kernels.wasm from disk.
  browserBuild(
    [
      [/^\.\/native-loader$/, here("./src/native-loader.browser.ts")],
      [/^\.\/wasm-bytes$/, here("./src/wasm-bytes.browser.ts")],
    ],
    { loader: { ".wasm": "binary" } },
  ),
];
