// Cross-compiles the N-API addon (native/tensor_ops.c) for the platforms this machine has a cross
// compiler for, into prebuilds/<platform>-<arch>/ under the file names node-gyp-build resolves
// (prebuildify's convention: `node.napi.node`, plus a `glibc`/`musl` tag on Linux):
//
//   linux-x64/node.napi.musl.node     musl-gcc                  (Debian: musl-tools)
//   linux-arm64/node.napi.glibc.node  aarch64-linux-gnu-gcc     (Debian: gcc-aarch64-linux-gnu)
//   win32-x64/node.napi.node          x86_64-w64-mingw32-gcc    (Debian: gcc-mingw-w64-x86-64)
//
// The host's own prebuild (linux-x64 glibc here) comes from node-gyp: build-native.mjs --prebuild.
// The addon is plain C against Node-API only, so no Node headers of the target are needed: the
// headers (and the Windows import definitions) come from the node-api-headers package, and the
// compiler flags from binding.gyp. N-API symbols stay undefined on ELF targets (the loading node
// process provides them); on Windows they are imported from node.exe through an import library
// generated from node-api-headers' def file. A missing cross compiler skips its target with a
// warning; --strict makes it an error (CI). macOS cannot be built here: it needs Apple's SDK.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const strict = process.argv.includes("--strict");

if (process.env.COMPAT_TENSOR_OPS === "js") {
  console.log("tensor-ops: COMPAT_TENSOR_OPS=js, skipping the cross-compiled prebuilds");
  process.exit(0);
}

/** Cross targets: where the file goes and which compiler makes it. */
const CROSS_TARGETS = [
  { platform: "linux", arch: "x64", libc: "musl", file: "node.napi.musl.node", cc: "musl-gcc", apt: "musl-tools" },
  { platform: "linux", arch: "arm64", libc: "glibc", file: "node.napi.glibc.node", cc: "aarch64-linux-gnu-gcc", apt: "gcc-aarch64-linux-gnu" },
  { platform: "win32", arch: "x64", file: "node.napi.node", cc: "x86_64-w64-mingw32-gcc", dlltool: "x86_64-w64-mingw32-dlltool", apt: "gcc-mingw-w64-x86-64" },
];

function onPath(cmd) {
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: pkgDir, stdio: ["ignore", "inherit", "inherit"] });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${r.error ? r.error.message : `exit ${r.status}`}`);
}

// The same flags node-gyp gets from binding.gyp (kept in one place), plus the ones node-gyp adds itself.
function gypCflags() {
  const gyp = JSON.parse(readFileSync(join(pkgDir, "binding.gyp"), "utf8"));
  const target = gyp.targets.find((t) => t.target_name === "tensor_ops");
  return [...target.cflags, "-fvisibility=hidden", `-DNODE_GYP_MODULE_NAME=${target.target_name}`, "-DBUILDING_NODE_EXTENSION"];
}

function build(target, headers, scratch) {
  const outDir = join(pkgDir, "prebuilds", `${target.platform}-${target.arch}`);
  mkdirSync(outDir, { recursive: true });
  const out = join(outDir, target.file);
  const args = [...gypCflags(), "-I", headers.include_dir, "-shared", "-o", out, "native/tensor_ops.c"];
  if (target.platform === "linux") args.unshift("-fPIC");
  if (target.libc === "musl") {
    // musl-gcc sees only musl's headers; the kernel's uapi headers (linux/fs.h) are libc-neutral.
    const kernel = join(scratch, "musl-kernel-headers");
    mkdirSync(kernel, { recursive: true });
    for (const [name, from] of [["linux", "/usr/include/linux"], ["asm-generic", "/usr/include/asm-generic"], ["asm", "/usr/include/x86_64-linux-gnu/asm"]]) {
      if (existsSync(from) && !existsSync(join(kernel, name))) symlinkSync(from, join(kernel, name));
    }
    args.unshift("-isystem", kernel);
  }
  if (target.platform === "win32") {
    // Import library for node.exe's Node-API exports; libgcc linked statically (its CPU detection
    // backs __builtin_cpu_supports), so the DLL imports only node.exe, KERNEL32 and msvcrt.
    const implib = join(scratch, "libnode_api.a");
    run(target.dlltool, ["-d", headers.def_paths.node_api_def, "-l", implib, "-m", "i386:x86-64"]);
    args.push("-L", scratch, "-lnode_api", "-static-libgcc", "-s");
  } else {
    args.push("-s");
  }
  run(target.cc, args);
  return out;
}

const headers = createRequire(import.meta.url)("node-api-headers");
const scratch = mkdtempSync(join(tmpdir(), "tensor-ops-prebuilds-"));
let failed = 0;
try {
  for (const target of CROSS_TARGETS) {
    const name = `${target.platform}-${target.arch}${target.libc ? ` ${target.libc}` : ""}`;
    if (!onPath(target.cc)) {
      console.warn(`tensor-ops: no ${target.cc} (apt-get install ${target.apt}): prebuild for ${name} skipped`);
      failed++;
      continue;
    }
    try {
      const out = build(target, headers, scratch);
      console.log(`tensor-ops: prebuild for ${name}: ${out.slice(pkgDir.length)}`);
    } catch (error) {
      console.warn(`tensor-ops: prebuild for ${name} failed: ${error.message}`);
      failed++;
    }
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
if (failed > 0 && strict) process.exit(1);
