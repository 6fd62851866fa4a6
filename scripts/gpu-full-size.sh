#!/usr/bin/env bash
# Full-size Qwen3.8-Flash-Next speed on one GPU at TP1 with synthetic weights drawn on the GPU
# (marked synthetic; the n-gram table is 51 GB of host memory): prefill of a 1,024-, an 8,192- and
# a 262,080-token prompt and 64 tokens decoded right after each (medians of 3 after a warmup; for
# the longest, whose 64 tokens end at the model's 262,144 positions, one run after the warmup,
# since its prefill alone takes minutes; its prefill rate chunk by chunk along the prompt), with
# the device memory in use and the GPU's utilization sampled by nvidia-smi; then decode at the
# longest context against 8,192. Called by scripts/gpu-run.sh when Q38_FULL_SIZE is set.
# Usage: scripts/gpu-full-size.sh PACKED_DIR OUT_DIR
set -uo pipefail
packed=$1
out=$2
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader,nounits -i 0 -lms 1000 \
    > "$out/full-size-gpu.csv" &
sampler=$!
tmp=$(mktemp)
declare -A decode
for spec in 1024:120:3 8192:240:3 262080:560:1; do  # prompt:timeout_s:repeats
  IFS=: read -r prompt limit repeats <<< "$spec"
  start=$SECONDS
  echo "=== prompt $prompt, started $(date -u +%T)" >> "$out/full-size.log"
  timeout "$limit" "$packed/bin/q38-bench-model" --synthetic release --device cuda --tp 1 \
      --prompt_tokens "$prompt" --decode_tokens 64 --repeats "$repeats" --prefill_chunk_times > "$tmp" 2>&1
  rc=$?
  cat "$tmp" >> "$out/full-size.log"
  echo "full size TP1, prompt $prompt (synthetic, rc $rc, $((SECONDS - start)) s): $(grep -E '^[0-9]' "$tmp")"
  ((prompt > 8192)) && grep -E "prefill tok/s by 8,192-token chunk" "$tmp"
  decode[$prompt]=$(awk '/^1 /{print $3}' "$tmp")
done
if [[ -n ${decode[262080]:-} && -n ${decode[8192]:-} ]]; then
  echo "decode at 262,144 against 8,192 context: $(awk -v a="${decode[262080]}" -v b="${decode[8192]}" 'BEGIN{printf "%.3f", a / b}')"
fi
kill $sampler 2>/dev/null
rm -f "$tmp"
echo "peak device memory $(cut -d, -f2 "$out/full-size-gpu.csv" | sort -n | tail -1) MiB"
