#!/usr/bin/env bash
# One device call's GPU work, step by step, from packed binaries (scripts/pack-gpu-run.sh): each
# pack .tar.xz is unpacked once, each step's output goes to logs/NN-NAME.log (an ab step's table to
# ab-BENCH/ab.txt), and OUT/steps.txt gets one line a step (exit status, seconds). A failing step
# does not stop the rest. The logs live outside OUT and OUT/logs.tgz holds them all, made again
# after every step: a call brings back only a few files (8), and a call cut short by its limit
# still brings back every finished step's log.
# Usage: scripts/gpu-steps.sh OUT STEP...
#   test:PACK:BIN[:FILTER]   a test binary of the pack (an optional gtest filter)
#   bench:PACK:BIN[:ARGS]    a bench binary (ARGS split on spaces)
#   model:PACK[:ARGS]        q38-bench-model, full-size synthetic weights at TP1 (ARGS replace the
#                            default --prompt_tokens 8192 --decode_tokens 64 --repeats 3)
#   ab:OLD:NEW:BENCH         scripts/gpu-ab.sh (a bench, then the model, ABAB) into ab-BENCH
#   ncu:PACK:BIN:KERNEL[:ARGS]  Nsight Compute's full set of sections (throughputs, occupancy,
#                            warp stall reasons, source counters) for one launch of the bench's
#                            kernels whose name matches the regular expression KERNEL, after 3
#                            launches skipped; the details page is the log
# PACK is the path of a pack's .tar.xz, as carried into the call; a slim pack's full pack (its
# LIBS_FROM) is unpacked from the .tar.xz beside it.
set -uo pipefail
out=$1
shift
root=/tmp/q38-packs
work=$(mktemp -d)
mkdir -p "$out" "$work/logs" "$root"
here=$(cd "$(dirname "$0")" && pwd)
# model_cuda_test reads the trained small model from the checkout (models/small), as CTest tells it.
export Q38_SOURCE_DIR=${Q38_SOURCE_DIR:-$(dirname "$here")}

# unpack PACK: prints the unpacked directory.
unpack() {
  local name
  name=$(basename "$1" .tar.xz)
  [[ -d $root/$name ]] || tar -C "$root" -xJf "$1"
  [[ -f $root/$name/LIBS_FROM ]] && unpack "$(dirname "$1")/$(cat "$root/$name/LIBS_FROM").tar.xz" > /dev/null
  echo "$root/$name"
}

n=0
for step in "$@"; do
  n=$((n + 1))
  IFS=: read -r kind a b c <<< "$step"  # the last field keeps any further colons (gtest filters)
  # The log is named for the binary (test, bench, ncu), the pack (model) or the bench (ab).
  case $kind in test|bench|ncu) what=$b ;; model) what=$(basename -- "$a" .tar.xz) ;; *) what=$c ;; esac
  log=$(printf '%s/logs/%02d-%s-%s.log' "$work" "$n" "$kind" "$what")
  start=$(date +%s)
  case $kind in
    test)
      dir=$(unpack "$a")
      LD_LIBRARY_PATH="$dir/lib" timeout 590 "$dir/bin/$b" ${c:+--gtest_filter=$c} > "$log" 2>&1 ;;
    bench)
      dir=$(unpack "$a")
      # shellcheck disable=SC2086  # the arguments are split on purpose
      LD_LIBRARY_PATH="$dir/lib" timeout 590 "$dir/bin/$b" ${c:-} > "$log" 2>&1 ;;
    model)
      dir=$(unpack "$a")
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$dir/lib" timeout 590 "$dir/bin/q38-bench-model" --synthetic release --device cuda --tp 1 \
          ${b:---prompt_tokens 8192 --decode_tokens 64 --repeats 3} > "$log" 2>&1 ;;
    ab)
      bash "$here/gpu-ab.sh" "$(unpack "$a")" "$(unpack "$b")" "$work/ab-$c" "$c" > "$log" 2>&1 ;;
    ncu)
      dir=$(unpack "$a")
      kernel=${c%%:*}
      args=
      [[ $c == *:* ]] && args=${c#*:}
      ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$dir/lib" timeout 590 "$ncu" --set full --kernel-name "regex:$kernel" --launch-skip 3 \
          --launch-count 1 --page details "$dir/bin/$b" $args > "$log" 2>&1 ;;
    *)
      echo "unknown step $step" > "$log"
      false ;;
  esac
  rc=$?
  printf '%02d %-60s exit %d, %d s\n' "$n" "$step" "$rc" "$(($(date +%s) - start))" | tee -a "$out/steps.txt"
  tar -C "$work" -czf "$out/logs.tgz.part" . && mv "$out/logs.tgz.part" "$out/logs.tgz"
done
