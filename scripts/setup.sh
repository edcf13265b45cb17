#!/usr/bin/env bash
# Fresh machine to working demo: install from the lockfile, build every package,
# build (or reuse) llama-server/llama-mtmd-cli/llama-quantize, then run the main
# job once with `ollama-compat demo`: a tiny Ollama-format vision model, detected,
# translated (text GGUF + mmproj) and served by the real llama-server for one text
# and one image answer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-deps.sh
npm ci --no-audit --no-fund
npm run build
LLAMA_BIN=$(bash scripts/build-llama-tools.sh)
export LLAMA_BIN
LLAMA_SERVER="$LLAMA_BIN/llama-server" node packages/cli/dist/bin.cjs demo "$@"
