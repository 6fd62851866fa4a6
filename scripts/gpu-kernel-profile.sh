#!/usr/bin/env bash
# Where a full-size step's GPU time goes, for decode and for prefill: Nsight Compute times every
# kernel (synthetic release weights, TP1; kernels serialized, so launch gaps are not in it) and
# scripts/kernel_profile.py sums them per kernel and per step (the decode GEMV also per grid size,
# which names its shape). Called by scripts/gpu-run.sh when Q38_PROFILE is set; skipped where ncu
# is missing.
# Usage: scripts/gpu-kernel-profile.sh PACKED_DIR OUT_DIR [TIMEOUT_S per profile] [PREFILL_TOKENS=8192]
set -uo pipefail
packed=$1
out=$2
timeout_s=${3:-200}
prefill_tokens=${4:-8192}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [[ ! -x $ncu ]]; then
  echo "kernel profile: skipped (no ncu)"
  exit 0
fi
# profile NAME PROMPT_TOKENS SUMMARY_ARGS...: one warmup and one measured run of the prompt and
# one decode step, every kernel timed.
profile() {
  local name=$1 prompt=$2
  shift 2
  timeout "$timeout_s" "$ncu" --metrics gpu__time_duration.sum --csv --page raw --print-units base \
      "$packed/bin/q38-bench-model" --synthetic release --device cuda --tp 1 --prompt_tokens "$prompt" \
      --decode_tokens 2 --repeats 1 > "$out/$name-profile.csv" 2> "$out/$name-profile.err"
  echo "$name profile: ncu exit $? ($(wc -l < "$out/$name-profile.csv") lines)"
  python3 "$(dirname "$0")/kernel_profile.py" "$out/$name-profile.csv" --step_marker EmbedStreams "$@" |
    tee "$out/$name-profile.txt"
  xz -f "$out/$name-profile.csv"
}
# A 1-token prompt: all four steps are 1-token steps.
profile decode 1 --by_grid GemvKernel
# Steps alternate prefill, decode: keep the prefills.
profile prefill "$prefill_tokens" --period 2 --pick 0
