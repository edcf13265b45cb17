#!/usr/bin/env bash
# Builds llama-server, llama-mtmd-cli, llama-quantize and rpc-server (with the RPC
# backend on, so llama-server --rpc works) from the llama.cpp source
# that node-llama-cpp ships as a git bundle. The result is cached outside the
# checkout, keyed by the bundle's commit and the CPU baseline, so CI and later
# sessions reuse it.
#
# The CPU baseline is fixed, never -march=native: on x86-64 it is x86-64-v3 (SSE4.2,
# AVX, AVX2, FMA, F16C, BMI2; no AVX-512, no AMX), the feature set of node-llama-cpp's
# "haswell" CPU variant, which the testkit pins for the same reason. A native build on
# an Intel host with AMX puts Q8_0/Q4_0/K-quant weights in the AMX buffer type and
# llama-server dies with SIGSEGV at warm-up; and every host of this project (AMD
# without AVX-512, Intel with AVX-512 and AMX) must run the same kernels, so a test's
# verdict cannot depend on the CPU it ran on.
# Also compiles scripts/llama-log-drain.c into the bin directory (see there).
# Prints the bin directory on stdout.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# node-llama-cpp exports no package.json, so resolve its entry (dist/index.js) and go up.
bundle=${LLAMA_BUNDLE:-$(node -e 'const p=require("path"); console.log(p.join(p.dirname(require.resolve("node-llama-cpp", {paths:[process.argv[1]]})), "..", "llama", "gitRelease.bundle"))' "$root/packages/testkit")}
[ -f "$bundle" ] || { echo "build-llama-tools: no bundle at $bundle (run npm ci first)" >&2; exit 1; }

commit=$(git bundle list-heads "$bundle" | awk '$2=="HEAD"{print $1; exit}')
[ -n "$commit" ] || commit=$(git bundle list-heads "$bundle" | awk '{print $1; exit}')
# The build flavour is part of the key: "-rpc" builds have GGML_RPC=ON, then the CPU baseline.
case $(uname -m) in
  x86_64 | amd64)
    baseline=x86-64-v3
    cpu_flags=(-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    for f in avx2 fma f16c bmi2; do
      grep -qw "$f" /proc/cpuinfo 2>/dev/null || { echo "build-llama-tools: this CPU lacks $f, which the x86-64-v3 baseline needs" >&2; exit 1; }
    done
    ;;
  *)
    # elsewhere: the compiler's default target for the architecture, still not the host's own
    baseline=$(uname -m)-generic
    cpu_flags=()
    ;;
esac
cache=${OLLAMA_COMPAT_CACHE:-$HOME/.cache/ollama-compat}/llama.cpp/$commit-rpc-$baseline
bin=$cache/bin
targets=(llama-server llama-mtmd-cli llama-quantize rpc-server)
# CMake target of each tool where it differs from the installed name.
cmake_target() { case $1 in rpc-server) echo ggml-rpc-server ;; *) echo "$1" ;; esac; }

drain_src=$root/scripts/llama-log-drain.c
drain_lib=$bin/liblog-drain.so

have_all() { for t in "${targets[@]}"; do [ -x "$bin/$t" ] || return 1; done; }
have_drain() { [ -f "$drain_lib" ] && [ ! "$drain_src" -nt "$drain_lib" ]; }
build_drain() {
  cc -shared -fPIC -O2 -o "$drain_lib.tmp.$$" "$drain_src" >&2
  mv -f "$drain_lib.tmp.$$" "$drain_lib"
}
if have_all && have_drain; then echo "$bin"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if have_all; then
  have_drain || build_drain
  echo "$bin"
  exit 0
fi

src=$cache/src
if [ ! -d "$src/.git" ]; then
  rm -rf "$src"
  git clone -q "$bundle" "$src" >&2
  git -C "$src" checkout -q "$commit" >&2
fi

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$cache/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DGGML_RPC=ON \
  "${cpu_flags[@]}" "${launcher[@]}" >&2
cmake_targets=()
for t in "${targets[@]}"; do cmake_targets+=("$(cmake_target "$t")"); done
cmake --build "$cache/build" -j "$(nproc)" --target "${cmake_targets[@]}" >&2

mkdir -p "$bin.tmp"
for t in "${targets[@]}"; do cp "$cache/build/bin/$(cmake_target "$t")" "$bin.tmp/$t"; done
rm -rf "$bin"; mv "$bin.tmp" "$bin"
build_drain
echo "$bin"
