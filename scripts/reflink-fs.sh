#!/usr/bin/env bash
# A reflink-capable filesystem for the shared-extent tests: a sparse XFS image
# (reflink=1) loop-mounted on a temporary folder.
#   scripts/reflink-fs.sh up          prints the mount point (use it as COMPAT_REFLINK_DIR)
#   scripts/reflink-fs.sh down DIR    unmounts it and removes the image
# Needs root (mount -o loop) and xfsprogs. Without them `up` fails with one line on stderr,
# and the tests that need COMPAT_REFLINK_DIR are skipped.
set -euo pipefail
case "${1:-}" in
  up)
    command -v mkfs.xfs >/dev/null 2>&1 || { echo "reflink-fs: no mkfs.xfs (Debian package xfsprogs)" >&2; exit 1; }
    dir=$(mktemp -d "${TMPDIR:-/tmp}/compat-reflink-XXXXXX")
    img="$dir.img"
    # XFS wants at least 300 MB; the image is sparse, so it costs what the tests write
    truncate -s 512M "$img"
    if ! mkfs.xfs -q -f -m reflink=1 "$img" >/dev/null 2>&1 || ! mount -o loop "$img" "$dir" 2>/dev/null; then
      rm -f "$img"; rmdir "$dir"
      echo "reflink-fs: cannot loop-mount an XFS image here (needs root and loop devices)" >&2
      exit 1
    fi
    echo "$dir"
    ;;
  down)
    dir=${2:?usage: reflink-fs.sh down DIR}
    umount "$dir" 2>/dev/null || true
    rmdir "$dir" 2>/dev/null || true
    rm -f "$dir.img"
    ;;
  *)
    echo "usage: reflink-fs.sh up | down DIR" >&2
    exit 2
    ;;
esac
