#!/usr/bin/env bash
# Fresh machine to working demo: install from the lockfile, build every package,
# build (or reuse) llama-server/llama-mtmd-cli/llama-quantize, then run the main
# job once: translate an Ollama-format GGUF and serve it with real llama-server.
set -euo pipefail
cd "$(dirname "$0")/.."
npm ci --no-audit --no-fund
npm run build
LLAMA_BIN=$(bash scripts/build-llama-tools.sh)
export LLAMA_BIN
node --import tsx scripts/demo.ts "$@"
