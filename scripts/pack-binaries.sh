#!/usr/bin/env bash
# Packs the release binaries and the shared libraries they need (except the C library's and the GPU
# driver's) into DIR as a verified bundle with debug info stripped (`q38 bundle create`,
# docs/bundle.md), so they run on another x86-64 machine with an equal or newer glibc:
#   LD_LIBRARY_PATH=DIR/lib DIR/bin/q38-server --bundle DIR ...
# Builds the release binaries and the build manifest first.
# Usage: scripts/pack-binaries.sh DIR [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
build=${2:-build}
cmake --build "$build" --target q38_build_manifest
rm -rf "$out"
"$build/client/q38" bundle create --build "$build" --out "$out" --strip_debug
du -sh "$out"
