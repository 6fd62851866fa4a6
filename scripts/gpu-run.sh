#!/usr/bin/env bash
# Everything q38 checks on a GPU machine, in one call (issue 5): the kernels against their CPU
# references, the model against the CPU FP32 reference at TP1 and TP2, decode graphs against eager
# runs, the server end to end on GPUs (and that stopping it gives the memory back), and the
# measurements. (The SM70 legality check runs where the sources build: CTest's Sm70Legality.)
# Runs from the repository root on binaries packed by scripts/pack-gpu-run.sh (nothing is built
# here); a few files go to $OUT (default out/gpu): summary.txt, tests.log, bench.log,
# nvidia-smi.txt and the full-size run's files.
# Usage: scripts/gpu-run.sh [PACKED_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
packed=$(realpath "${1:-.devbin}")
out=${OUT:-out/gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$packed/lib:${LD_LIBRARY_PATH:-}"
export Q38_BIN_DIR="$packed/bin" Q38_SOURCE_DIR="$PWD"
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
note "q38 GPU run $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
note "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); commit $(cat "$packed/COMMIT" 2>/dev/null)"

failed=0
for t in cuda_backend_test linear_cuda_test norm_cuda_test rope_cuda_test conv_cuda_test gdn_cuda_test \
         attention_cuda_test moe_cuda_test hc_cuda_test ple_cuda_test model_cuda_test gpu_server_test parity_test; do
  start=$SECONDS
  "$packed/bin/$t" > "$out/test.log" 2>&1
  rc=$?
  { echo "=== $t (exit $rc)"; cat "$out/test.log"; } >> "$out/tests.log"
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/test.log" | tr '\n' ' ')
  [[ $rc -eq 0 ]] || failed=1
  note "$(printf '%-22s %-4s %4ss  %s' "$t" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - start)) "$line")"
  grep -h "top-1 agreement" "$out/test.log" | sed 's/^/    /' | tee -a "$summary"
done
rm -f "$out/test.log"

# Measurements: the tiny model through the runner at TP1 and TP2 (graphs on), medians of 5.
ckpt="$out/tiny"
"$packed/bin/q38-make-checkpoint" --out "$ckpt" --size tiny --seed 1 > /dev/null
for tp in 1 2; do
  "$packed/bin/q38-bench-model" --model "$ckpt" --device cuda --tp "$tp" --prompt_tokens 512 --decode_tokens 128 \
      --repeats 5 > "$out/bench.log.tmp" 2>&1 && note "tiny TP$tp: $(grep -E '^[0-9]' "$out/bench.log.tmp")"
  cat "$out/bench.log.tmp" >> "$out/bench.log"
done
if [[ -n "${Q38_FULL_SIZE:-}" ]]; then
  bash scripts/gpu-full-size.sh "$packed" "$out" | tee -a "$summary"
fi
rm -rf "$ckpt" "$out/bench.log.tmp"
note "overall: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)"
exit $failed
