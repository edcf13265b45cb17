// Builds the WebAssembly SIMD kernels (wasm/kernels.c) into wasm/kernels.wasm with clang's wasm32
// target and lld (Debian: apt-get install clang lld). Never fails the surrounding build: without the
// toolchain it writes an empty wasm/kernels.wasm, which the loader reports as "not built" and the JS
// kernels run instead. Pass --strict to exit non-zero on failure (CI must exercise the WASM path).
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const strict = process.argv.includes("--strict");
const out = join(pkgDir, "wasm/kernels.wasm");
const clang = process.env.COMPAT_WASM_CC ?? "clang";

const args = [
  "--target=wasm32",
  "-msimd128",
  "-O3",
  "-ffp-contract=off",
  "-nostdlib",
  "-Wall",
  "-Wextra",
  "-Werror",
  "-Wl,--no-entry",
  "-Wl,--export=__heap_base",
  "-Wl,--strip-all",
  "-o",
  out,
  join(pkgDir, "wasm/kernels.c"),
];
const result = spawnSync(clang, args, { stdio: "inherit" });
if (result.status === 0) {
  console.log("tensor-ops: WASM SIMD kernels built (wasm/kernels.wasm)");
} else {
  writeFileSync(out, new Uint8Array(0));
  const why = result.error ? result.error.message : `exit ${result.status}`;
  console.warn(`tensor-ops: WASM build failed (${why}; needs clang and lld with the wasm32 target); the JS kernels will be used`);
  if (strict) process.exit(1);
}
