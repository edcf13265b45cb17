#!/usr/bin/env node
// Builds the N-API addon from source (native/tensor_ops.c, binding.gyp) with node-gyp into
// build/Release/tensor_ops.node, which node-gyp-build loads before any prebuild. Three callers:
//
//   compat-tensor-ops-build (this file as the package's bin), `npm run build:native`:
//       build from source; exits non-zero when the build fails.
//   the package's `install` script (--if-needed): only when no prebuild loads on this machine
//       (another platform, libc or CPU), and never fails the install: a failed build leaves the
//       WASM and JS kernels, with a warning. In a source checkout it does nothing (`npm run build` builds).
//   the package build (--optional --prebuild): also ships the result as this platform's prebuild,
//       prebuilds/<platform>-<arch>/node.napi[.glibc|.musl].node (node-gyp-build's naming); a
//       missing compiler only warns. build-prebuilds.mjs cross-compiles the other platforms.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const flags = new Set(process.argv.slice(2));
const optional = flags.has("--optional") || flags.has("--if-needed");

if (process.env.COMPAT_TENSOR_OPS === "js") {
  console.log("tensor-ops: COMPAT_TENSOR_OPS=js, skipping the native build");
  process.exit(0);
}

if (flags.has("--if-needed")) {
  if (existsSync(join(pkgDir, "src/native.ts"))) process.exit(0); // source checkout: the package build handles it
  // `npm install --build-from-source` (npm_config_build_from_source) builds even where a prebuild loads.
  if (process.env.npm_config_build_from_source !== "true") {
    try {
      createRequire(import.meta.url)("node-gyp-build")(pkgDir); // a prebuild (or an earlier build) loads
      process.exit(0);
    } catch (error) {
      console.log(`tensor-ops: ${String(error.message).split("\n")[0]}; building the addon from source`);
    }
  }
}

function nodeGypCommand() {
  const candidates = [
    process.env.npm_config_node_gyp,
    join(dirname(process.execPath), "../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"),
    join(dirname(process.execPath), "node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"),
  ];
  for (const c of candidates) if (c && existsSync(c)) return [process.execPath, [c]];
  return [process.platform === "win32" ? "node-gyp.cmd" : "node-gyp", []];
}

// Prefer the headers that ship with this node (offline machines cannot download them).
function nodeDirArgs() {
  if (process.env.npm_config_nodedir) return [`--nodedir=${process.env.npm_config_nodedir}`];
  const prefix = join(dirname(process.execPath), "..");
  return existsSync(join(prefix, "include/node/node_api.h")) ? [`--nodedir=${prefix}`] : [];
}

// node-gyp-build's libc tag: musl where node runs on musl (no glibc version in its report).
function libcTag() {
  if (process.platform !== "linux") return "";
  return process.report?.getReport().header.glibcVersionRuntime ? ".glibc" : ".musl";
}

const [cmd, pre] = nodeGypCommand();
const result = spawnSync(cmd, [...pre, "rebuild", ...nodeDirArgs()], { cwd: pkgDir, stdio: "inherit" });
const built = join(pkgDir, "build/Release/tensor_ops.node");
if (result.status === 0 && existsSync(built)) {
  let shipped = "";
  if (flags.has("--prebuild")) {
    // N-API keeps it valid across Node versions, and the addon picks AVX2 or scalar kernels at
    // load, so it is not tied to this CPU. Earlier untagged names are removed: they would match any libc.
    const prebuildDir = join(pkgDir, "prebuilds", `${process.platform}-${process.arch}`);
    const file = `node.napi${libcTag()}.node`;
    mkdirSync(prebuildDir, { recursive: true });
    if (file !== "node.napi.node") rmSync(join(prebuildDir, "node.napi.node"), { force: true });
    copyFileSync(built, join(prebuildDir, file));
    shipped = `, prebuilds/${process.platform}-${process.arch}/${file}`;
  }
  console.log(`tensor-ops: native kernels built (build/Release/tensor_ops.node${shipped})`);
} else {
  const why = result.error ? result.error.message : `exit ${result.status}`;
  console.warn(`tensor-ops: native build failed (${why}); the WASM or JS kernels will be used`);
  if (!optional) process.exit(1);
}
