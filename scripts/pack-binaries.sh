#!/usr/bin/env bash
# Copies the built tools (and, with --tests, the GPU test binaries) and every shared library they
# load into DIR/bin and DIR/lib, so they run on another x86-64 machine with an equal or newer glibc
# (LD_LIBRARY_PATH=DIR/lib). Left out: the C library's own, and what a GPU machine's driver and
# system provide (libcuda, libnvidia-*, NCCL). A stopgap until `q38 bundle create` (issue 6)
# verifies what it packs.
# Usage: scripts/pack-binaries.sh DIR [BUILD_DIR] [--tests]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
build=${2:-build}
tools=(server/q38-server worker/q38-worker client/q38 worker/model/q38-bench-model worker/model/q38-make-checkpoint worker/model/q38-run)
if [[ "${3:-}" == --tests ]]; then
  for t in cuda_backend linear_cuda norm_cuda rope_cuda conv_cuda gdn_cuda attention_cuda moe_cuda hc_cuda ple_cuda; do
    tools+=("kernels/${t}_test")
  done
  tools+=(worker/model/model_cuda_test tests/gpu_server_test tests/parity_test)
fi
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for t in "${tools[@]}"; do
  cp "$build/$t" "$out/bin/"
  ldd "$build/$t" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      libcuda.so.*|libnvidia-*|libnccl.so.*) ;;
      *) cp -n "$lib" "$out/lib/" ;;
    esac
  done
done
git rev-parse HEAD > "$out/COMMIT" 2>/dev/null || true
git diff --quiet HEAD 2>/dev/null || echo "(with uncommitted changes)" >> "$out/COMMIT"
strip --strip-debug "$out"/bin/* "$out"/lib/*  # debug info is most of the size
du -sh "$out"
