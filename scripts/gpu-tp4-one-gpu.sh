#!/usr/bin/env bash
# Full-size Qwen3.8-Flash-Next at TP4 with all four ranks as processes on GPU 0 (CUDA IPC
# collectives, synthetic weights, the n-gram table made once for the host and mapped by every
# rank): prefill of an 8192-token prompt and decode after it, medians of 3 after a warmup. This
# measures that the shape runs and what sharing one GPU costs, not the speed of four GPUs: the
# four processes' kernels take turns on the GPU. Samples every 2 s each rank's device memory
# (nvidia-smi) and host memory (resident, of which shared), and the host's memory in use, and
# prints the peaks.
# Called by scripts/gpu-run.sh when Q38_FULL_SIZE is set.
# Usage: scripts/gpu-tp4-one-gpu.sh PACKED_DIR OUT_DIR [TIMEOUT_S]
set -uo pipefail
packed=$1
out=$2
log=$out/tp4-one-gpu.log
samples=$out/tp4-one-gpu-memory.csv
echo "pid,device_mib,rss_kib,shared_kib" > "$samples"
"$packed/bin/q38-bench-model" --synthetic release --device cuda --tp 4 --gpus 0,0,0,0 --processes \
    --prompt_tokens 8192 --decode_tokens 16 --repeats 3 > "$log" 2>&1 &
bench=$!
start=$SECONDS
while kill -0 $bench 2>/dev/null; do
  if (( SECONDS - start > ${3:-400} )); then
    pkill -KILL -f q38-bench-model
    echo "full size TP4 on one GPU: stopped after ${3:-400} s" >> "$log"
    break
  fi
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' |
    while IFS=, read -r pid mib; do
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      shr=$(awk '/^RssShmem/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      echo "$pid,$mib,${rss:-0},${shr:-0}" >> "$samples"
    done
  free -m | awk 'NR == 2 {print $3 + $5}' >> "$out/tp4-one-gpu-host.txt"  # used + shared (tmpfs, memfd)
  sleep 2
done
wait $bench
rc=$?
echo "full size TP4 on one GPU (4 processes, synthetic, rc $rc, $((SECONDS - start)) s): $(grep -E '^[0-9]' "$log")"
grep -E "kernels in the decode graph|communicator|route" "$log" | head -3
# Peak per process: device MiB, host resident and shared GiB.
awk -F, 'NR > 1 { if ($2 > d[$1]) d[$1] = $2; if ($3 > r[$1]) r[$1] = $3; if ($4 > s[$1]) s[$1] = $4 }
  END { for (p in d) printf "  pid %s: peak device %d MiB, host resident %.1f GiB (shared %.1f GiB)\n", p, d[p], r[p] / 1048576, s[p] / 1048576 }' "$samples"
sort -n "$out/tp4-one-gpu-host.txt" | tail -1 | awk '{printf "  host memory in use at its peak: %.1f GiB (used + shared)\n", $1 / 1024}'
exit $rc
