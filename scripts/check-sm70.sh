#!/usr/bin/env bash
# SM70 legality (docs/design.md §5): every CUDA kernel of the tree must assemble for the V100's sm_70.
# CUDA 13 can no longer target sm_70, so each .cu is compiled to PTX for compute_75 (the lowest
# CUDA 13 accepts), the PTX's target is set to sm_70, and a CUDA 12.x ptxas assembles it for
# sm_70. Any instruction SM70 lacks (ldmatrix, cp.async, bf16/fp8 conversions, wgmma, ...) fails
# the assembly with ptxas naming it.
#
# Usage: scripts/check-sm70.sh [PTXAS]   PTXAS: a CUDA 12.x ptxas (default: $Q38_PTXAS12, then the
# one pip's nvidia-cuda-nvcc-cu12 put in .venv-cuda12, then triton's).
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ptxas=${1:-${Q38_PTXAS12:-}}
if [[ -z "$ptxas" ]]; then
  for candidate in .venv-cuda12/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas \
                   "$(python3 -c 'import os, triton; print(os.path.dirname(triton.__file__) + "/backends/nvidia/bin/ptxas")' 2>/dev/null)"; do
    [[ -x "$candidate" ]] && ptxas=$candidate && break
  done
fi
[[ -x "$nvcc" ]] || { echo "check-sm70: no nvcc" >&2; exit 2; }
[[ -n "$ptxas" && -x "$ptxas" ]] || { echo "check-sm70: no CUDA 12.x ptxas (pip install nvidia-cuda-nvcc-cu12)" >&2; exit 2; }
version=$("$ptxas" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')
[[ "${version%%.*}" == 12 ]] || { echo "check-sm70: $ptxas is CUDA $version, not 12.x" >&2; exit 2; }
# The newest PTX ISA a CUDA 12.x ptxas reads: 12.x reads ISA 8.x with x = minor (12.8 → 8.7, 12.9 → 8.8).
minor=${version#*.}
isa="8.$(( minor >= 8 ? minor - 1 : minor ))"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
count=0
while IFS= read -r cu; do
  name=$(echo "$cu" | tr '/' '_')
  "$nvcc" -std=c++17 -arch=compute_75 -ptx -I. -I"$(dirname "$nvcc")/../include" "$cu" -o "$work/$name.ptx"
  sed -e "s/^\.target sm_75/.target sm_70/" -e "s/^\.version [0-9.]*/.version $isa/" "$work/$name.ptx" > "$work/$name.sm70.ptx"
  if "$ptxas" -arch=sm_70 "$work/$name.sm70.ptx" -o "$work/$name.cubin" 2> "$work/$name.err"; then
    kernels=$(grep -c '^\.visible \.entry\|^\.entry' "$work/$name.sm70.ptx" || true)
    echo "ok    $cu ($kernels kernels)"
    count=$((count + kernels))
  else
    echo "FAIL  $cu"; sed 's/^/      /' "$work/$name.err"
    status=1
  fi
done < <(if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git ls-files --cached --others --exclude-standard '*.cu'; else find . -name '*.cu' -not -path './build*' | sed 's|^\./||' | sort; fi)
if [[ $count -eq 0 ]]; then echo "check-sm70: no kernels found" >&2; exit 1; fi
echo "check-sm70: $count kernels assembled for sm_70 with ptxas $version (PTX ISA $isa)"
exit $status
