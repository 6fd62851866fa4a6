#!/usr/bin/env bash
# A kernel change, before and after, in one machine start: a kernel's lab bench, then full-size
# decode and prefill (TP1, synthetic weights, 8,192-token prompt, medians of 3 after a warmup),
# alternating the old and the new packed binaries (scripts/pack-gpu-run.sh) twice, ABAB, so that
# drift of the machine shows as a difference between the two rounds of one side.
# Usage: scripts/gpu-ab.sh OLD_PACKED NEW_PACKED OUT_DIR [BENCH=moe_bench]
# Writes OUT_DIR/ab.txt (the bench's rows, mismatches and exit status, and the model's lines, per
# side and round).
set -uo pipefail
old=$1 new=$2 out=$3 bench=${4:-moe_bench}
mkdir -p "$out"
export LD_LIBRARY_PATH="$new/lib:${LD_LIBRARY_PATH:-}"
for round in 1 2; do
  for side in old new; do
    dir=$old; [[ $side == new ]] && dir=$new
    echo "== round $round, $side: $bench"
    timeout 300 "$dir/bin/$bench" 2>&1 | grep -E '^\||^MISMATCH'
    echo "$bench exit ${PIPESTATUS[0]}"  # 1 where a check failed
    echo "== round $round, $side: full size TP1, prompt 8192 (TP prefill decode TPOT)"
    timeout 240 "$dir/bin/q38-bench-model" --synthetic release --device cuda --tp 1 --prompt_tokens 8192 \
        --decode_tokens 64 --repeats 3 2>&1 | grep -E '^[0-9]|kernels in the decode graph'
  done
done 2>&1 | tee "$out/ab.txt"
