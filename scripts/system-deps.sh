#!/usr/bin/env bash
# Debian packages the tests and builds need beyond Node: Chromium (browser tests), clang + lld (the
# WASM kernels), the cross compilers for @compat/tensor-ops' prebuilt addons (linux-arm64 glibc,
# linux-x64 musl, win32-x64), and qemu-user + Wine with arm64 runtime libraries to run those
# prebuilds under a Node of their platform (packages/tensor-ops/scripts/foreign-nodes.sh), and
# xfsprogs for the reflink filesystem of the shared-extent tests (scripts/reflink-fs.sh), GNU
# time, through which `npm run bench` runs every command it measures (peak RSS), curl, with
# which a test runs the README's curl example against a served model, and libfuse 3 (fuse3 for
# fusermount3, libfuse3-dev and pkg-config to build @compat/mount's daemon), and docker-registry
# (CNCF distribution: the real OCI registry the pull tests download from), with openssl and
# ssh-keygen (openssh-client) for its token-auth test (a certificate the registry trusts, and the
# ed25519 key Ollama signs token requests with), and erofs-utils, whose fsck.erofs checks the
# mount's EROFS images with a reader that is not the kernel's.
# Installs what is missing; needs root and apt-get.
set -euo pipefail
# "command-or-file package" pairs
needs=(
  "chromium chromium"
  "clang clang"
  "wasm-ld lld"
  "aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu"
  "musl-gcc musl-tools"
  "x86_64-w64-mingw32-gcc gcc-mingw-w64-x86-64"
  "qemu-aarch64 qemu-user"
  "/usr/aarch64-linux-gnu/lib/libstdc++.so.6 libstdc++6-arm64-cross"
  "/usr/lib/wine/wine64 wine64"
  "mkfs.xfs xfsprogs"
  "/usr/bin/time time"
  "curl curl"
  "fusermount3 fuse3"
  "/usr/include/fuse3/fuse_lowlevel.h libfuse3-dev"
  "pkg-config pkg-config"
  "/usr/bin/docker-registry docker-registry"
  "openssl openssl"
  "ssh-keygen openssh-client"
  "fsck.erofs erofs-utils"
)
missing=()
for pair in "${needs[@]}"; do
  what=${pair% *}
  if [[ $what == /* ]]; then [ -e "$what" ] && continue; else command -v "$what" >/dev/null 2>&1 && continue; fi
  missing+=("${pair#* }")
done
[ ${#missing[@]} -eq 0 ] && exit 0
command -v apt-get >/dev/null 2>&1 || { echo "system-deps: install ${missing[*]} with your package manager" >&2; exit 1; }
apt-get update -qq
# Wine's recommends (32-bit Wine, fonts, ...) are not needed to run a 64-bit node.exe
plain=() norec=()
for p in "${missing[@]}"; do if [ "$p" = wine64 ]; then norec+=("$p"); else plain+=("$p"); fi; done
[ ${#plain[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${plain[@]}" >/dev/null
[ ${#norec[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${norec[@]}" >/dev/null
