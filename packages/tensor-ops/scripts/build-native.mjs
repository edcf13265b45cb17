// Builds the optional N-API addon (native/tensor_ops.c) into build/Release/tensor_ops.node.
// Never fails the surrounding build: without a compiler or node headers the JS kernels are used.
// Pass --strict to exit non-zero on failure (CI jobs that must exercise the native path).
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const strict = process.argv.includes("--strict");

if (process.env.COMPAT_TENSOR_OPS === "js") {
  console.log("tensor-ops: COMPAT_TENSOR_OPS=js, skipping the native build");
  process.exit(0);
}

function nodeGypCommand() {
  const candidates = [
    process.env.npm_config_node_gyp,
    join(dirname(process.execPath), "../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"),
    join(dirname(process.execPath), "node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"),
  ];
  for (const c of candidates) if (c && existsSync(c)) return [process.execPath, [c]];
  return ["node-gyp", []];
}

// Prefer the headers that ship with this node (offline machines cannot download them).
function nodeDirArgs() {
  if (process.env.npm_config_nodedir) return [`--nodedir=${process.env.npm_config_nodedir}`];
  const prefix = join(dirname(process.execPath), "..");
  return existsSync(join(prefix, "include/node/node_api.h")) ? [`--nodedir=${prefix}`] : [];
}

const [cmd, pre] = nodeGypCommand();
const result = spawnSync(cmd, [...pre, "rebuild", ...nodeDirArgs()], { cwd: pkgDir, stdio: "inherit" });
if (result.status === 0 && existsSync(join(pkgDir, "build/Release/tensor_ops.node"))) {
  // Ship it as a prebuild (node-gyp-build's layout): N-API keeps it valid across Node versions,
  // and the addon picks AVX2 or scalar kernels at load, so it is not tied to this CPU.
  const prebuildDir = join(pkgDir, "prebuilds", `${process.platform}-${process.arch}`);
  mkdirSync(prebuildDir, { recursive: true });
  copyFileSync(join(pkgDir, "build/Release/tensor_ops.node"), join(prebuildDir, "node.napi.node"));
  console.log(`tensor-ops: native kernels built (build/Release/tensor_ops.node, prebuilds/${process.platform}-${process.arch}/node.napi.node)`);
} else {
  const why = result.error ? result.error.message : `exit ${result.status}`;
  console.warn(`tensor-ops: native build failed (${why}); the JS kernels will be used`);
  if (strict) process.exit(1);
}
