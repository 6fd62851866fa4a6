#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (ASan + UBSan) in their own build
# directory and runs each for Q38_FUZZ_SECONDS (default 30), or Q38_FUZZ_RUNS executions when set,
# on its checked-in seed corpus (only the harnesses named as arguments, when there are any). New
# inputs go to $dir/corpus/<harness>, a crash's reproducer to $dir/crashes/<harness>/; any crash
# fails the script. Long runs are recorded in docs/fuzz.md.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${Q38_FUZZ_BUILD_DIR:-build-fuzz}
seconds=${Q38_FUZZ_SECONDS:-30}
runs=${Q38_FUZZ_RUNS:-}
jobs=${Q38_FUZZ_JOBS:-1}  # build parallelism: 1 leaves the cores to a concurrent main build
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(benchmark_reference generate_request openai_request safetensors model_config tokenizer_json)

CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQ38_FUZZ=ON -DQ38_CUDA=OFF >/dev/null
cmake --build "$dir" -j "$jobs" --target "${harnesses[@]/#/fuzz_}"
for h in "${harnesses[@]}"; do
  mkdir -p "$dir/corpus/$h" "$dir/crashes/$h"
  limit=(-max_total_time="$seconds")
  [ -z "$runs" ] || limit=(-runs="$runs")
  echo "fuzz: $h (${limit[*]})"
  # The first corpus directory receives new inputs; the checked-in seeds stay as they are.
  "$dir/tests/fuzz/fuzz_$h" "${limit[@]}" -print_final_stats=1 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$dir/crashes/$h/" -dict=tests/fuzz/json.dict "$dir/corpus/$h" "tests/fuzz/corpus/$h"
done
