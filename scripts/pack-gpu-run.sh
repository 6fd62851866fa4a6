#!/usr/bin/env bash
# Packs what scripts/gpu-run.sh runs on a GPU machine: the tools, the GPU test binaries, the benches
# and every shared library they load, into DIR/bin and DIR/lib (LD_LIBRARY_PATH=DIR/lib). Unlike a release
# bundle (scripts/pack-binaries.sh, `q38 bundle create`) it leaves out NCCL as well as the C
# library and the driver: the GPU machines provide NCCL, and at 218 MB it would not fit the few
# tens of MB a test run can carry there. DIR.tar.xz is the pack to carry: every binary holds the same
# kernels' code, and an xz dictionary larger than a binary stores it once (about a tenth of the size
# of a default xz). Unpack it with `tar xJf DIR.tar.xz`.
# A slim pack (Q38_PACK_ONLY="bin ..." and Q38_PACK_LIBS_FROM=NAME) holds only the named binaries
# and a lib link to ../NAME/lib, the full pack NAME of the same libraries: a few MB, so that one
# call can carry a full pack and several variants (scripts/gpu-steps.sh unpacks NAME first).
# Usage: scripts/pack-gpu-run.sh DIR [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
build=${2:-build}
only=${Q38_PACK_ONLY:-}
libs_from=${Q38_PACK_LIBS_FROM:-}
[[ -z $only || -n $libs_from ]] || { echo "Q38_PACK_ONLY needs Q38_PACK_LIBS_FROM" >&2; exit 1; }
tools=(server/q38-server worker/q38-worker client/q38 tools/run/q38-bench-model tools/checkpoint/q38-make-checkpoint tools/run/q38-run
       worker/model/model_cuda_test tests/gpu_server_test tests/parity_test worker/comm/cuda_group_test worker/comm/comm_bench)
for t in cuda_backend linear_cuda norm_cuda rope_cuda conv_cuda gdn_cuda attention_cuda moe_cuda hc_cuda ple_cuda logits_cuda; do
  tools+=("kernels/${t}_test")
done
tools+=(kernels/linear_bench kernels/hc_bench kernels/logits_bench kernels/moe_bench kernels/gdn_bench kernels/rope_bench kernels/attention_bench
       kernels/ple_bench kernels/conv_bench kernels/norm_bench kernels/elementwise_bench)  # the kernels' lab benches
if [[ -n $only ]]; then
  picked=()
  for t in "${tools[@]}"; do [[ " $only " == *" $(basename "$t") "* ]] && picked+=("$t"); done
  [[ ${#picked[@]} -eq $(wc -w <<< "$only") ]] || { echo "Q38_PACK_ONLY names a binary the pack does not have" >&2; exit 1; }
  tools=("${picked[@]}")
fi
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for t in "${tools[@]}"; do
  cp "$build/$t" "$out/bin/"
  [[ -n $libs_from ]] && continue
  ldd "$build/$t" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      libcuda.so.*|libnvidia-*|libnccl.so.*) ;;
      *) cp -n "$lib" "$out/lib/" ;;
    esac
  done
done
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")  # the tree the build came from
git -C "$src" rev-parse HEAD > "$out/COMMIT" 2>/dev/null || true
git -C "$src" diff --quiet HEAD 2>/dev/null || echo "(with uncommitted changes)" >> "$out/COMMIT"
strip --strip-unneeded "$out"/bin/* 2>/dev/null
if [[ -n $libs_from ]]; then
  rmdir "$out/lib" && ln -s "../$libs_from/lib" "$out/lib" && echo "$libs_from" > "$out/LIBS_FROM"
else
  strip --strip-debug "$out"/lib/*  # debug info is most of the size
fi
du -sh "$out"
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T1 --lzma2=preset=9e,dict=256MiB > "$out.tar.xz"
du -sh "$out.tar.xz"
