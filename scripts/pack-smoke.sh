#!/usr/bin/env bash
# The packages as a user gets them: `npm pack` every published package, install the
# tarballs into a scratch project outside the workspace, and use them from there:
# ollama-compat --help, translate and mount on an Ollama-format file, ESM and CJS imports,
# the native tensor-ops kernels (not the JS fallback), its WASM tier and its build-from-source
# fallback (prebuilds removed: npm rebuild, compat-tensor-ops-build), the mount daemon's build from
# source (npm rebuild, compat-mount-build); with LLAMA_BIN set, the
# examples' serve and `ollama-compat demo` against the real llama-server; every tarball checked by
# @arethetypeswrong/cli; and the release flow (`changeset version` on a scratch copy, then pack the
# bumped packages). Needs `npm run build` first.
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

packages=(files gguf tensor-ops handlers clip views mount store prepare server-bridge ollama-api cli)
mkdir -p "$scratch/tarballs" "$scratch/app"
for p in "${packages[@]}"; do
  # publint: exports, files and types resolve as published
  (cd "$root/packages/$p" && "$root/node_modules/.bin/publint" --strict >/dev/null) || { echo "pack-smoke: publint failed for $p" >&2; exit 1; }
  (cd "$root/packages/$p" && npm pack --silent --pack-destination "$scratch/tarballs" >/dev/null)
done
# types as TypeScript resolves them (node16 and bundler; node10 cannot see exports subpaths such
# as @compat/gguf/advanced, and every package needs Node >= 20.19 anyway). Needs attw >= 0.18:
# 0.17.x kept only the last chunk of its streaming gunzip, so any tarball that unpacks to more than
# one chunk gave untar no entries and crashed with "reading 'filename'" (not an npm 11 problem).
for t in "$scratch"/tarballs/*.tgz; do
  "$root/node_modules/.bin/attw" --profile node16 --format ascii "$t" >"$scratch/attw.log" 2>&1 \
    || { cat "$scratch/attw.log" >&2; echo "pack-smoke: attw found problems in $(basename "$t")" >&2; exit 1; }
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
# the WASM tier from the tarball (what a browser or an addon-less Node gets), ESM and CJS
COMPAT_TENSOR_OPS=wasm node --input-type=module -e '
import { GgmlType } from "@compat/gguf";
import { activeBackend, toF32 } from "@compat/tensor-ops";
const out = toF32(GgmlType.F16, new Uint8Array([0x00, 0x3c, 0x00, 0xc0]), 2);
if (activeBackend() !== "wasm" || out[0] !== 1 || out[1] !== -2) throw new Error(`wasm tier: ${activeBackend()} ${out}`);
'
COMPAT_TENSOR_OPS=wasm node -e '
const { activeBackend } = require("@compat/tensor-ops");
if (activeBackend() !== "wasm") throw new Error(`CJS wasm tier: ${activeBackend()}`);
'
# build-from-source fallback: without a matching prebuild the package runs WASM; `npm rebuild`
# (its install script builds when no prebuild loads, as on a platform without one) and the
# package's compat-tensor-ops-build bin both compile binding.gyp + native/ from the tarball
ops="$scratch/app/node_modules/@compat/tensor-ops"
native_equals_js='
const { GgmlType } = require("@compat/gguf");
const { activeBackend, setBackend, toF32 } = require("@compat/tensor-ops");
const want = process.argv[1];
if (activeBackend() !== want) throw new Error(`fallback: backend is ${activeBackend()}, expected ${want}`);
const f16 = new Uint8Array(new Uint16Array(65536).map((_, i) => i).buffer);
const q8 = new Uint8Array(34 * 64).map((_, i) => (i * 2654435761) >>> 24);
for (let b = 0; b < 64; b++) q8[34 * b + 1] &= 0x3b; // finite block scales
const run = () => [toF32(GgmlType.F16, f16, 65536), toF32(GgmlType.Q8_0, q8, 64 * 32)].map((a) => Buffer.from(a.buffer));
const fast = run();
setBackend("js");
const js = run();
if (!fast.every((b, i) => b.equals(js[i]))) throw new Error(`fallback: ${want} results differ from JS`);
'
rm -rf "$ops/prebuilds" "$ops/build"
node -e "$native_equals_js" wasm
npm rebuild --silent @compat/tensor-ops >"$scratch/rebuild.log" 2>&1 || { cat "$scratch/rebuild.log" >&2; echo "pack-smoke: npm rebuild @compat/tensor-ops failed" >&2; exit 1; }
node -e "$native_equals_js" native
rm -rf "$ops/build"
node -e "$native_equals_js" wasm
./node_modules/.bin/compat-tensor-ops-build >"$scratch/rebuild.log" 2>&1 || { cat "$scratch/rebuild.log" >&2; echo "pack-smoke: compat-tensor-ops-build failed" >&2; exit 1; }
node -e "$native_equals_js" native
# the mount daemon's build from source, through the same runner (@compat/files' runNativeBuild):
# without its prebuild, `npm rebuild` (the install script) and compat-mount-build compile
# native/mountd.c from the tarball; the prebuild is put back for the mount below
mnt="$scratch/app/node_modules/@compat/mount"
mv "$mnt/prebuilds" "$scratch/mount-prebuilds"
npm rebuild --silent @compat/mount >"$scratch/rebuild.log" 2>&1 || { cat "$scratch/rebuild.log" >&2; echo "pack-smoke: npm rebuild @compat/mount failed" >&2; exit 1; }
"$mnt/build/ollama-compat-mountd" --version >/dev/null || { cat "$scratch/rebuild.log" >&2; echo "pack-smoke: npm rebuild @compat/mount built no daemon" >&2; exit 1; }
rm -rf "$mnt/build"
./node_modules/.bin/compat-mount-build >"$scratch/rebuild.log" 2>&1 || { cat "$scratch/rebuild.log" >&2; echo "pack-smoke: compat-mount-build failed" >&2; exit 1; }
"$mnt/build/ollama-compat-mountd" --version >/dev/null || { echo "pack-smoke: compat-mount-build built no daemon" >&2; exit 1; }
rm -rf "$mnt/build"
mv "$scratch/mount-prebuilds" "$mnt/prebuilds"
node -e '
const { parseGguf } = require("@compat/gguf");
const { translate } = require("@compat/handlers");
if (typeof parseGguf !== "function" || typeof translate !== "function") throw new Error("CJS entry points missing");
'
# the mount from the tarballs: the prebuilt daemon, a store holding the fixture, `mount --daemon`,
# and the mounted file equal to what translate wrote
node -e '
const s = require("@compat/mount").fuseSupport();
if (!s.usable || !s.daemon.includes("node_modules/@compat/mount/prebuilds/")) throw new Error("mount daemon: " + JSON.stringify(s));
' || { echo "pack-smoke: no usable prebuilt mount daemon" >&2; exit 1; }
node --input-type=module -e 'import { buildOllamaStore } from "@compat/store"; await buildOllamaStore(process.argv[1], [{ name: "fixture:1", model: process.argv[2] }]);' "$scratch/store" "$src"
"$bin" mount "$scratch/mnt" --models "$scratch/store" --cache-dir "$scratch/cache" --daemon >"$scratch/mount.log" 2>&1 || { cat "$scratch/mount.log" >&2; echo "pack-smoke: ollama-compat mount failed" >&2; exit 1; }
same=yes
cmp -s "$scratch/mnt/fixture-1.gguf" "$scratch/app/translated.gguf" || same=no
kill "$(cat "$scratch/mnt.pid")"
for _ in $(seq 100); do [ -e "$scratch/mnt.pid" ] || break; sleep 0.05; done
[ "$same" = yes ] || { echo "pack-smoke: the mounted file differs from translate's output" >&2; exit 1; }

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

# release flow: `changeset version` on a scratch copy of the manifests and changesets (never on
# the repo), then every bumped package packs with its new version and bumped internal deps
release="$scratch/release"
mkdir -p "$release"
(cd "$root" && git ls-files -co --exclude-standard -- package.json .changeset 'packages/*/package.json' 'packages/*/CHANGELOG.md' \
  'packages/*/README.md' 'packages/*/LICENSE' | while read -r f; do [ -f "$f" ] && cp --parents "$f" "$release/"; done)
ln -s "$root/node_modules" "$release/node_modules"
pending=$(find "$release/.changeset" -name '*.md' ! -name README.md | wc -l)
(cd "$release" && ./node_modules/.bin/changeset version >"$scratch/changeset.log" 2>&1) \
  || { cat "$scratch/changeset.log" >&2; echo "pack-smoke: changeset version failed" >&2; exit 1; }
mkdir -p "$scratch/release-tarballs"
for p in "${packages[@]}"; do
  cp -r "$root/packages/$p/dist" "$release/packages/$p/"
  (cd "$release/packages/$p" && npm pack --silent --ignore-scripts --pack-destination "$scratch/release-tarballs" >/dev/null)
done
node --input-type=module -e '
import { readFileSync, readdirSync } from "node:fs";
const [release, pending, packages] = [process.argv[1], Number(process.argv[2]), process.argv.slice(3)];
const manifests = packages.map((p) => JSON.parse(readFileSync(`${release}/packages/${p}/package.json`, "utf8")));
const versions = new Map(manifests.map((m) => [m.name, m.version]));
if (readdirSync(`${release}/.changeset`).some((f) => f.endsWith(".md") && f !== "README.md")) throw new Error("changesets left unconsumed");
for (const m of manifests) {
  for (const [dep, range] of Object.entries(m.dependencies ?? {})) {
    if (versions.has(dep) && range !== versions.get(dep)) throw new Error(`${m.name} depends on ${dep}@${range}, released as ${versions.get(dep)}`);
  }
}
const bumped = manifests.filter((m) => m.version !== "0.0.0").map((m) => `${m.name}@${m.version}`);
if (pending > 0 && bumped.length === 0) throw new Error(`changeset version bumped nothing (${pending} changesets)`);
console.log(`pack-smoke: release dry run bumps ${bumped.join(", ")}`);
' "$release" "$pending" "${packages[@]}"
[ "$(ls "$scratch/release-tarballs" | wc -l)" -eq "${#packages[@]}" ] || { echo "pack-smoke: release packs missing" >&2; exit 1; }

echo "pack-smoke: @compat/tensor-ops tarball $(stat -c %s "$scratch"/tarballs/compat-tensor-ops-*.tgz) bytes ($(tar tzf "$scratch"/tarballs/compat-tensor-ops-*.tgz | grep -c '^package/prebuilds/.*\.node$') prebuilds)"
echo "pack-smoke: ok ($(ls "$scratch/tarballs" | wc -l) tarballs, attw, translate, mount, ESM+CJS, tensor-ops native+wasm+build from source, mount daemon build from source, release dry run${demo:-})"
