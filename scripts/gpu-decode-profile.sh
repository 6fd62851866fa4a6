#!/usr/bin/env bash
# Where a full-size decode step's GPU time goes: Nsight Compute times every kernel of a few
# 1-token steps (synthetic release weights, TP1; kernels serialized, so launch gaps are not in
# it) and scripts/kernel_profile.py sums them per kernel and per step. Called by
# scripts/gpu-run.sh when Q38_PROFILE is set; skipped where ncu is missing.
# Usage: scripts/gpu-decode-profile.sh PACKED_DIR OUT_DIR [TIMEOUT_S]
set -uo pipefail
packed=$1
out=$2
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [[ ! -x $ncu ]]; then
  echo "decode profile: skipped (no ncu)"
  exit 0
fi
# One warmup and one measured repeat of a 1-token prompt and 2 decode steps: six 1-token steps.
timeout "${3:-200}" "$ncu" --metrics gpu__time_duration.sum --csv --page raw --print-units base \
    "$packed/bin/q38-bench-model" --synthetic release --device cuda --tp 1 --prompt_tokens 1 --decode_tokens 2 \
    --repeats 1 > "$out/decode-profile.csv" 2> "$out/decode-profile.err"
echo "decode profile: ncu exit $? ($(wc -l < "$out/decode-profile.csv") lines)"
python3 "$(dirname "$0")/kernel_profile.py" "$out/decode-profile.csv" --step_marker EmbedStreams | tee "$out/decode-profile.txt"
xz -f "$out/decode-profile.csv"
