// Node: the addon, resolved by node-gyp-build from the package root: build/Release (a local
// build) first, then prebuilds/<platform>-<arch>/ (the binary shipped in the tarball).
// The browser build swaps this module for native-loader.browser.ts.
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

export function loadNativeAddon<T>(): T {
  const require = createRequire(import.meta.url);
  const load = require("node-gyp-build") as (dir: string) => T;
  return load(fileURLToPath(new URL("..", import.meta.url)));
}
