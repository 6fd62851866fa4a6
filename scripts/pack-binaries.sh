#!/usr/bin/env bash
# Copies the built tools and every shared library they load, except the C library's own, into
# DIR/bin and DIR/lib, so they run on another x86-64 machine with an equal or newer glibc
# (LD_LIBRARY_PATH=DIR/lib). A stopgap until `q38 bundle create` (issue 6) verifies what it packs.
# Usage: scripts/pack-binaries.sh DIR [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
build=${2:-build}
tools=(server/q38-server worker/q38-worker client/q38 worker/model/q38-bench-model worker/model/q38-make-checkpoint worker/model/q38-run)
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for t in "${tools[@]}"; do
  cp "$build/$t" "$out/bin/"
  ldd "$build/$t" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      *) cp -n "$lib" "$out/lib/" ;;
    esac
  done
done
strip --strip-debug "$out"/bin/* "$out"/lib/*  # debug info is most of the size
du -sh "$out"
