#!/usr/bin/env bash
# What the server path adds per token: TPOT through q38-server (one CPU worker, measured by the
# q38 client) against TPOT of the model runner's own decode loop (q38-bench-model), same tiny
# model, same TP 1, same machine, alternating the two within one run. Prints each round and the
# medians. Usage: scripts/bench-server-overhead.sh [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
build=${Q38_BUILD_DIR:-build}
cmake --build "$build" --target q38-make-checkpoint q38-server q38-worker q38 q38-bench-model > /dev/null
dir=$(mktemp -d)
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
"$build/worker/model/q38-make-checkpoint" --out "$dir/tiny" --seed 1 > /dev/null
"$build/server/q38-server" --model "$dir/tiny" --tp 1 --listen 127.0.0.1:0 --metrics "" \
  --ready_file "$dir/ready.json" > "$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -f "$dir/ready.json" ] && break; sleep 0.1; done
port=$(jq -r .grpc_port "$dir/ready.json")
runner=() server=()
for i in $(seq 1 "$rounds"); do
  r=$("$build/worker/model/q38-bench-model" --model "$dir/tiny" --tp 1 --prompt_tokens 64 --decode_tokens 64 --repeats 3 |
      tail -1 | jq '1000 / .runs[0].decode_median')
  "$build/client/q38" bench --server "127.0.0.1:$port" --prompt_len 64 --max_tokens 64 --requests 3 --json "$dir/b.json" > /dev/null 2>&1
  s=$(jq '1000 * .summary.tpot_s.p50' "$dir/b.json")
  runner+=("$r") server+=("$s")
  printf 'round %d: runner TPOT %.3f ms, server TPOT %.3f ms\n' "$i" "$r" "$s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mr=$(median "${runner[@]}") ms=$(median "${server[@]}")
awk -v r="$mr" -v s="$ms" 'BEGIN {printf "median runner TPOT %.3f ms, server TPOT %.3f ms, server path adds %.3f ms (%.1f%%)\n", r, s, s - r, 100 * (s - r) / r}'
