#!/usr/bin/env bash
# The packages as a user gets them: `npm pack` every published package, install the
# tarballs into a scratch project outside the workspace, and use them from there:
# ollama-compat --help and translate on an Ollama-format file, ESM and CJS imports,
# the native tensor-ops kernels (not the JS fallback), and with LLAMA_BIN set the
# examples' serve and `ollama-compat demo` against the real llama-server. Needs `npm run build` first.
# Usage: scripts/pack-smoke.sh [OLLAMA_GGUF]   (default: a testkit Llama 3 fixture; prints "pack-smoke: ok")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ollama-compat-pack-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
src=${1:-}
if [ -z "$src" ]; then
  src=$(cd "$root" && node --import tsx --input-type=module -e '
    import { generateFixture, writeFixture } from "@compat/testkit";
    const f = generateFixture("llama", { seed: 3, layout: "ollama", variant: "llama3-metadata-gap" });
    console.log((await writeFixture(f, process.argv[1])).text);' "$scratch")
fi

packages=(gguf tensor-ops handlers clip server-bridge cli)
mkdir -p "$scratch/tarballs" "$scratch/app"
for p in "${packages[@]}"; do
  # publint: exports, files and types resolve as published
  (cd "$root/packages/$p" && "$root/node_modules/.bin/publint" --strict >/dev/null) || { echo "pack-smoke: publint failed for $p" >&2; exit 1; }
  (cd "$root/packages/$p" && npm pack --silent --pack-destination "$scratch/tarballs" >/dev/null)
done
cd "$scratch/app"
npm init -y >/dev/null
npm install --no-audit --no-fund --silent "$scratch"/tarballs/*.tgz

bin=./node_modules/.bin/ollama-compat
"$bin" --help | grep -q "translate" || { echo "pack-smoke: --help lacks translate" >&2; exit 1; }
"$bin" translate "$src" -o "$scratch/app/translated.gguf"
[ -s "$scratch/app/translated.gguf" ] || { echo "pack-smoke: no translated file" >&2; exit 1; }
"$bin" inspect "$scratch/app/translated.gguf" >/dev/null

node --input-type=module -e '
import { readGguf } from "@compat/gguf";
import { activeBackend } from "@compat/tensor-ops";
const m = await readGguf(process.argv[1]);
if (m.tensors.length === 0) throw new Error("no tensors read");
await m.close();
if (activeBackend() !== "native") throw new Error(`tensor-ops backend is ${activeBackend()}, expected native`);
' "$scratch/app/translated.gguf"
node -e '
const { parseGguf } = require("@compat/gguf");
const { translate } = require("@compat/handlers");
if (typeof parseGguf !== "function" || typeof translate !== "function") throw new Error("CJS entry points missing");
'
# the examples, as a user would run them
cp "$root"/examples/*.mjs "$scratch/app/"
node read-metadata.mjs "$src" | grep -q "tensors" || { echo "pack-smoke: examples/read-metadata.mjs failed" >&2; exit 1; }
node translate.mjs "$src" "$scratch/app/example-out.gguf" | grep -q "wrote" || { echo "pack-smoke: examples/translate.mjs failed" >&2; exit 1; }

if [ -n "${LLAMA_BIN:-}" ]; then
  LLAMA_SERVER="$LLAMA_BIN/llama-server" node serve.mjs "$scratch/app/translated.gguf" | grep -q "answered" \
    || { echo "pack-smoke: examples/serve.mjs failed" >&2; exit 1; }
  # the demo from the installed tarballs: its fixture generator ships inside @compat/cli
  LLAMA_SERVER="$LLAMA_BIN/llama-server" "$bin" demo > demo.log 2>&1 || { cat demo.log >&2; echo "pack-smoke: ollama-compat demo failed" >&2; exit 1; }
  grep -q "demo: ok" demo.log || { cat demo.log >&2; echo "pack-smoke: ollama-compat demo did not finish" >&2; exit 1; }
  demo=", demo"
fi

echo "pack-smoke: ok ($(ls "$scratch/tarballs" | wc -l) tarballs, translate, ESM+CJS, tensor-ops native${demo:-})"
