#!/usr/bin/env bash
# Full-size Qwen3.8-Flash-Next speed on one GPU at TP1 with synthetic weights drawn on the GPU
# (marked synthetic; the n-gram table is 51 GB of host memory): prefill of a 1024- and an
# 8192-token prompt and decode right after them, medians of 3 after a warmup, with the device
# memory in use and the GPU's utilization sampled by nvidia-smi. Called by scripts/gpu-run.sh
# when Q38_FULL_SIZE is set.
# Usage: scripts/gpu-full-size.sh PACKED_DIR OUT_DIR
set -uo pipefail
packed=$1
out=$2
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader,nounits -i 0 -lms 1000 \
    > "$out/full-size-gpu.csv" &
sampler=$!
tmp=$(mktemp)
for spec in 1024:120 8192:240; do
  prompt=${spec%:*}
  start=$SECONDS
  echo "=== prompt $prompt, started $(date -u +%T)" >> "$out/full-size.log"
  timeout "${spec#*:}" "$packed/bin/q38-bench-model" --synthetic release --device cuda --tp 1 \
      --prompt_tokens "$prompt" --decode_tokens 64 --repeats 3 > "$tmp" 2>&1
  rc=$?
  cat "$tmp" >> "$out/full-size.log"
  echo "full size TP1, prompt $prompt (synthetic, rc $rc, $((SECONDS - start)) s): $(grep -E '^[0-9]' "$tmp")"
done
kill $sampler 2>/dev/null
rm -f "$tmp"
echo "peak device memory $(cut -d, -f2 "$out/full-size-gpu.csv" | sort -n | tail -1) MiB"
