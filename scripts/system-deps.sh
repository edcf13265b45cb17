#!/usr/bin/env bash
# Debian packages the tests and builds need beyond Node: Chromium (browser tests) and
# clang + lld (the WASM kernels). Installs what is missing; needs root and apt-get.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v clang >/dev/null 2>&1 && command -v wasm-ld >/dev/null 2>&1; then
  exit 0
fi
command -v apt-get >/dev/null 2>&1 || { echo "system-deps: install chromium, clang and lld with your package manager" >&2; exit 1; }
apt-get update -qq
apt-get install -y -qq chromium clang lld >/dev/null
