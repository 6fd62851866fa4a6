#!/usr/bin/env bash
# Everything q38 checks on a GPU machine, in one call: the kernels against their CPU
# references, the model against the CPU FP32 reference at TP1 and TP2, decode graphs against eager
# runs, the server end to end on GPUs (and that stopping it gives the memory back), and the
# measurements; with Q38_EVAL_SMALL, Q38_FULL_SIZE and Q38_PROFILE also the small model's
# evaluation on GPUs, the full-size speed and the decode and prefill kernel profiles. (The SM70 legality check
# runs where the sources build: CTest's Sm70Legality.)
# Runs from the repository root on binaries packed by scripts/pack-gpu-run.sh (nothing is built
# here); $OUT (default out/gpu) ends with summary.txt and results.tar.xz, which holds the rest:
# tests.log, bench.log, comm_bench.log, contract-one-gpu/, linear-bench.log, hc_bench.log, logits_bench.log, moe_bench.log, gdn_bench.log, rope_bench.log, attention_bench.log,
# ple_bench.log, conv_bench.log, norm_bench.log, elementwise_bench.log, nvidia-smi.txt, the evaluation's and the full-size run's
# files, the profiles.
# Scratch files (checkpoints, one test's log) stay outside $OUT, so that a run cut off before the
# archive still leaves fewer files there than the device tool brings back.
# Q38_GPU_PARTS picks some of the parts for a call that has not the time for all (a device call
# runs at most 10 minutes): a space-separated list of tests, benches, comm, contract, tiny, full
# (full size at TP1) and tp4 (full size at TP4 on one GPU); the default is the first five, and the
# last two with Q38_FULL_SIZE. Q38_EVAL_SMALL and Q38_PROFILE add their parts to any list.
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
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
note() { echo "$*" | tee -a "$summary"; }
parts=" ${Q38_GPU_PARTS:-tests benches comm contract tiny${Q38_FULL_SIZE:+ full tp4}} "
part() { [[ $parts == *" $1 "* ]]; }

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
note "q38 GPU run $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
note "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); commit $(cat "$packed/COMMIT" 2>/dev/null)"

# A crashed model test again, to tell its cause: with every launch waiting for its kernel (a
# missing wait between host and device goes away there), then under compute-sanitizer's memcheck
# (out-of-bounds and misaligned accesses). A failed assertion is not rerun: its log holds the
# numbers, and memcheck takes minutes over the model test.
# Its argument: the log of the crashed run.
diagnose_crash() {
  # The test that was running: a crash prints no verdict.
  local test
  test=$(grep -oE '^\[ RUN      \] [A-Za-z0-9_./]+' "$1" | tail -1 | awk '{print $4}')
  [[ -n $test ]] || { note "  model_cuda_test crashed before any test ran"; return 0; }
  CUDA_LAUNCH_BLOCKING=1 timeout 240 "$packed/bin/model_cuda_test" --gtest_filter="$test" > "$scratch/serialized.log" 2>&1
  note "  model_cuda_test $test again with CUDA_LAUNCH_BLOCKING=1: exit $?"
  { echo "=== $test with CUDA_LAUNCH_BLOCKING=1"; cat "$scratch/serialized.log"; } >> "$out/tests.log"
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
  [[ -n $sanitizer ]] || { note "  no compute-sanitizer here: memcheck skipped"; return 0; }
  timeout 300 "$sanitizer" --tool memcheck --print-limit 20 "$packed/bin/model_cuda_test" --gtest_filter="$test" \
      > "$scratch/memcheck.log" 2>&1
  note "  ... under compute-sanitizer memcheck: exit $? ($(grep -m1 -E 'ERROR SUMMARY' "$scratch/memcheck.log"))"
  grep -m5 -E 'Invalid|out of bounds|at 0x' "$scratch/memcheck.log" | sed 's/^/    /' | tee -a "$summary"
  { echo "=== $test under memcheck"; cat "$scratch/memcheck.log"; } >> "$out/tests.log"
}

failed=0
part tests && for t in cuda_backend_test linear_cuda_test norm_cuda_test rope_cuda_test conv_cuda_test gdn_cuda_test \
         attention_cuda_test moe_cuda_test hc_cuda_test ple_cuda_test logits_cuda_test cuda_group_test model_cuda_test \
         gpu_server_test parity_test; do
  start=$SECONDS
  "$packed/bin/$t" > "$scratch/test.log" 2>&1
  rc=$?
  { echo "=== $t (exit $rc)"; cat "$scratch/test.log"; } >> "$out/tests.log"
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$scratch/test.log" | tr '\n' ' ')
  [[ $rc -eq 0 ]] || failed=1
  note "$(printf '%-22s %-4s %4ss  %s' "$t" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - start)) "$line")"
  # The agreement lines, less the long lists of decisions (those stay in tests.log).
  grep -h -e "top-1 agreement" -e "along the probe" -e "widest gap" -e "Failure$" -e "^Expected" "$scratch/test.log" |
    sed 's/^/    /' | tee -a "$summary"
  [[ $t != model_cuda_test ]] || grep -q '^\[  FAILED  \]\|^\[  PASSED  \]' "$scratch/test.log" || diagnose_crash "$scratch/test.log"
done

# The dense linear kernels' lab bench (kernels/linear/linear_bench.cu): the stream-read and WMMA
# ceilings, every decode GEMV shape at TP1/2/4 against the old kernel (v0), 100 small GEMVs as one
# graph, the prefill GEMM. Its tables go to the summary, its output to linear-bench.log;
# Q38_BENCH_SWEEP=1 adds every GEMV configuration (linear-bench-sweep.csv). A variant that
# disagrees with the reference fails the run.
if part benches; then
start=$SECONDS
timeout 300 "$packed/bin/linear_bench" ${Q38_BENCH_SWEEP:+--sweep --csv "$out/linear-bench-sweep.csv"} \
    > "$out/linear-bench.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || failed=1
note "$(printf '%-22s %-4s %4ss' linear_bench "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - start)))"
sed -n '/^ceilings/,$p' "$out/linear-bench.log" | sed 's/^/    /' | tee -a "$summary"
# The fused ops' lab benches: the hyper-connection pre step (five kernels against two), the
# greedy token (the logits to the host against ArgMax on the device), the routed experts
# (decode and prefill, and the shared expert added in their combine), the GDN layer's four
# kernels, attention's per-head norm and rotation (seven kernels against three), and decode
# attention (the grouped split kernel against the query-head one, the merge against the merge
# before) with the indexer's selection from 8,192 to 262,144 context, at full-size shapes; then
# the kernels no fused op covers, each alone against the stream read: PLE's load and gate, the
# causal conv (PLE's and GDN's), RmsNorm and the elementwise kernels.
for bench in hc_bench logits_bench moe_bench gdn_bench rope_bench attention_bench ple_bench conv_bench norm_bench \
    elementwise_bench; do
  start=$SECONDS
  timeout 120 "$packed/bin/$bench" > "$out/$bench.log" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] || failed=1
  note "$(printf '%-22s %-4s %4ss' "$bench" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - start)))"
  grep -E '^\||MISMATCH' "$out/$bench.log" | sed 's/^/    /' | tee -a "$summary"
done
fi

# The collective bench (worker/comm/comm_bench.cc): the IPC all-reduce, one-shot and two-shot,
# 1 KB to 64 MB, at world 2 and 4, ranks as processes and as threads; NCCL's beside it where each
# rank has a GPU of its own.
if part comm; then
start=$SECONDS
timeout 300 "$packed/bin/comm_bench" > "$out/comm_bench.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || failed=1
note "$(printf '%-22s %-4s %4ss' comm_bench "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - start)))"
grep -E '^\||^world|^route|MISMATCH' "$out/comm_bench.log" | sed 's/^/    /' | tee -a "$summary"
fi

# The small model's contract benchmark, health checks included, through the server at TP4 with
# every worker on GPU 0 (CUDA IPC; deploy/contracts/small-cuda.json).
if part contract; then
  bash scripts/gpu-contract-one-gpu.sh "$packed" "$out" | tee -a "$summary"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || failed=1
fi

# Measurements: the tiny model through the runner at TP1 and TP2 where two GPUs are visible
# (graphs on), medians of 5.
ckpt="$scratch/tiny"
"$packed/bin/q38-make-checkpoint" --out "$ckpt" --size tiny --seed 1 > /dev/null
tps=1; [[ $(nvidia-smi -L | wc -l) -ge 2 ]] && tps="1 2"
part tiny && for tp in $tps; do
  "$packed/bin/q38-bench-model" --model "$ckpt" --device cuda --tp "$tp" --prompt_tokens 512 --decode_tokens 128 \
      --repeats 5 > "$scratch/bench.log" 2>&1 && note "tiny TP$tp: $(grep -E '^[0-9]' "$scratch/bench.log")"
  cat "$scratch/bench.log" >> "$out/bench.log"
done
# The trained small model through the server on GPU ranks (the bars of docs/contract.md §8.3), beside any BF16-expert
# copy named in Q38_SMALL_BF16.
if [[ -n "${Q38_EVAL_SMALL:-}" ]]; then
  models=(--model nvfp4=models/small)
  [[ -n "${Q38_SMALL_BF16:-}" ]] && models+=(--model "bf16=$Q38_SMALL_BF16")
  timeout 240 python3 train/eval_server.py "${models[@]}" --build "$packed/bin" --device cuda --tp "${tps// /,}" --n 100 \
      --jobs 2 --out "$out/eval-small" > "$out/eval-small.log" 2>&1
  note "small model on GPUs: eval_server exit $? (eval-small/eval.md)"
  grep -E "^\| (arithmetic|copy|retrieval) \|" "$out/eval-small/eval.md" 2>/dev/null | tee -a "$summary"
fi
part full && bash scripts/gpu-full-size.sh "$packed" "$out" | tee -a "$summary"
part tp4 && bash scripts/gpu-tp4-one-gpu.sh "$packed" "$out" | tee -a "$summary"
if [[ -n "${Q38_PROFILE:-}" ]]; then
  bash scripts/gpu-kernel-profile.sh "$packed" "$out" "${Q38_PROFILE_TIMEOUT_S:-200}" | tee -a "$summary"
fi
note "overall: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)"
# The device tool brings back at most 8 files: all but the summary travel as one archive.
archive=$(mktemp)
tar cJf "$archive" -C "$out" --exclude=summary.txt . &&
  find "$out" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + && mv "$archive" "$out/results.tar.xz"
exit $failed
