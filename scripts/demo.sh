#!/usr/bin/env bash
# The main job on the embedded default: installs and builds, writes the tiny checkpoint, generates
# greedily at TP1 and TP4 (ranks as threads), and measures CPU prefill and decode throughput.
# Everything it writes goes under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
build=${Q38_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)" --target q38-make-checkpoint q38-run q38-bench-model
mkdir -p out
"$build/worker/model/q38-make-checkpoint" --out out/tiny --seed 1
prompt=1000,17,99,512,3,77,250,901,42,7,640,11
for tp in 1 4; do
  echo "== greedy generation, TP$tp"
  "$build/worker/model/q38-run" --model out/tiny --prompt "$prompt" --max_tokens 16 --tp "$tp"
done
echo "== CPU throughput (medians of 5 runs)"
"$build/worker/model/q38-bench-model" --model out/tiny --tp 1,4 --repeats 5 | tee out/bench-cpu.txt
echo "checkpoint: out/tiny   benchmark: out/bench-cpu.txt"
