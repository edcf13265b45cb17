// Node: the addon, resolved by node-gyp-build from the package root: build/Release (a local
// build) first, then prebuilds/<platform>-<arch>/ (the binary shipped in the tarball).
// The browser build swaps this module for native-loader.browser.ts.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export function loadNativeAddon<T>(): T {
  const require = createRequire(import.meta.url);
  const root = fileURLToPath(new URL("..", import.meta.url));
  const own = usualBinary(root);
  if (own !== undefined) {
    try {
      return require(own) as T;
    } catch {
      // node-gyp-build looks further, and its error says what it looked for
    }
  }
  const load = require("node-gyp-build") as (dir: string) => T;
  return load(root);
}

/**
 * The file node-gyp-build picks in the usual case (no PREBUILDS_ONLY or LIBC override): the local
 * build, else this platform's prebuild under the names build-native.mjs and build-prebuilds.mjs
 * give them. Found directly, the addon loads without node-gyp-build's own modules, package.json
 * reads and directory listings: part of every command's start (translate writes through it).
 */
function usualBinary(root: string): string | undefined {
  if (process.env.PREBUILDS_ONLY !== undefined || process.env.LIBC !== undefined) return undefined;
  const local = join(root, "build", "Release", "tensor_ops.node");
  if (existsSync(local)) return local;
  // node-gyp-build's test for musl
  const libc = process.platform === "linux" ? (existsSync("/etc/alpine-release") ? ".musl" : ".glibc") : "";
  const prebuild = join(root, "prebuilds", `${process.platform}-${process.arch}`, `node.napi${libc}.node`);
  return existsSync(prebuild) ? prebuild : undefined;
}
