#!/usr/bin/env node
// The N-API addon (native/tensor_ops.c, binding.gyp) as a target of @compat/files' runNativeBuild,
// the one native-build runner (its flags: none = build from source, --if-needed = the install
// script, --optional, --prebuild). node-gyp builds build/Release/tensor_ops.node, which
// node-gyp-build loads before any prebuild; callers: compat-tensor-ops-build (this file as the
// package's bin) and `npm run build:native`, the package's `install` script (only when no prebuild
// loads here: another platform, libc or CPU; a failure leaves the WASM and JS kernels), and the
// package build (--optional --prebuild: also this platform's prebuild,
// prebuilds/<platform>-<arch>/node.napi[.glibc|.musl].node, node-gyp-build's naming).
// build-prebuilds.mjs cross-compiles the other platforms.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const args = process.argv.slice(2);
// A source checkout's install step: `npm run build` builds, after @compat/files (whose dist this needs).
if (args.includes("--if-needed") && existsSync(join(pkgDir, "src/native.ts"))) process.exit(0);

const { runNativeBuild } = await import("@compat/files");
process.exitCode = await runNativeBuild(
  {
    label: "tensor-ops",
    what: "native kernels",
    pkgDir,
    skipped: process.env.COMPAT_TENSOR_OPS === "js" ? "COMPAT_TENSOR_OPS=js" : undefined,
    installed,
    compile,
    // N-API keeps it valid across Node versions, and the addon picks AVX2 or scalar kernels at
    // load, so it is not tied to this CPU. An earlier untagged name is removed: it would match any libc.
    prebuild: { file: `node.napi${libcTag()}.node`, replaces: ["node.napi.node"] },
    without: "the WASM or JS kernels will be used",
  },
  args,
);

function installed() {
  try {
    createRequire(import.meta.url)("node-gyp-build")(pkgDir); // a prebuild (or an earlier build) loads
    return true;
  } catch (error) {
    return String(error.message).split("\n")[0];
  }
}

function compile() {
  const [cmd, pre] = nodeGypCommand();
  const result = spawnSync(cmd, [...pre, "rebuild", ...nodeDirArgs()], { cwd: pkgDir, stdio: "inherit" });
  const file = join(pkgDir, "build/Release/tensor_ops.node");
  if (result.status === 0 && existsSync(file)) return { file };
  return { failed: result.error ? result.error.message : `node-gyp exited with ${result.status}` };
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
