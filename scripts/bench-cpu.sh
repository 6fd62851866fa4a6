#!/usr/bin/env bash
# CPU speed of the embedded default (docs/perf/cpu.md): models/small through the model runner at
# TP1 (one thread and the host's cores) and TP4 (rank threads in process, over shared memory, over
# Gloo), each with the fast and the exact CPU arithmetic, wall/user/system time per run; then the contract benchmark
# through q38-server with four CPU worker processes as the demo runs it (fast math, shm) and as it
# ran before both existed (exact math, Gloo), in the same run. Prints a table per part.
# Usage: scripts/bench-cpu.sh [repeats=3]   (Q38_BIN_DIR=DIR: binaries from DIR instead of building)
# Q38_SKIP_BEFORE=1 leaves out the server run with the old settings (it takes about 4 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
if [ -n "${Q38_BIN_DIR:-}" ]; then
  bin() { echo "$Q38_BIN_DIR/$1"; }
else
  build=${Q38_BUILD_DIR:-build}
  cmake --build "$build" --target q38-server q38-worker q38 q38-bench-model > /dev/null
  bin() { find "$build" -name "$1" -type f -perm -u+x | head -1; }
fi
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -TERM $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
model=models/small

echo "== the model runner: $model, 64-token prompt, 64 decoded tokens, median of $repeats after a warmup"
printf '%-5s %-10s %-6s %-8s %12s %12s %8s %8s %8s\n' ranks collective math threads "prefill t/s" "decode t/s" wall_s user_s sys_s
# threads "auto" (--cpu_threads 0): the host's cores shared out over the ranks.
for config in "1 inprocess exact 1" "1 inprocess fast 1" "1 inprocess fast auto" \
              "4 inprocess exact auto" "4 inprocess fast auto" "4 shm exact auto" "4 shm fast auto" \
              "4 gloo exact auto" "4 gloo fast auto"; do
  read -r tp comm math threads <<< "$config"
  /usr/bin/time -f '%e %U %S' -o "$dir/time" "$(bin q38-bench-model)" --model "$model" --tp "$tp" --cpu_comm "$comm" \
    --cpu_math "$math" --cpu_threads "${threads/auto/0}" --prompt_tokens 64 --decode_tokens 64 --repeats "$repeats" \
    > "$dir/out" 2> /dev/null
  read -r prefill decode < <(awk -v tp="$tp" '$1 == tp && NF == 4 {print $2, $3}' "$dir/out")
  read -r wall user sys < "$dir/time"
  printf '%-5s %-10s %-6s %-8s %12s %12s %8s %8s %8s\n' "TP$tp" "$comm" "$math" "$threads" "$prefill" "$decode" "$wall" "$user" "$sys"
done

# The server with four CPU worker processes; its contract benchmark (docs/contract.md) as the demo runs it.
serve_and_bench() {  # $1 label, $2 contract file, then extra server flags
  local label=$1 contract=$2
  shift 2
  rm -f "$dir/ready.json"
  # /usr/bin/time counts the server and the workers it reaps: the CPU time of the whole group.
  /usr/bin/time -f '%e %U %S' -o "$dir/time-$label" "$(bin q38-server)" --model "$model" --tp 4 --max_context 1024 \
    --listen 127.0.0.1:0 --metrics "" --worker_binary "$(bin q38-worker)" --ready_file "$dir/ready.json" "$@" \
    > "$dir/server-$label.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [ -f "$dir/ready.json" ] && break; sleep 0.1; done
  local port
  port=$(sed -n 's/.*"grpc_port": \([0-9]*\).*/\1/p' "$dir/ready.json")
  "$(bin q38)" bench --server "127.0.0.1:$port" --contract "$contract" > "$dir/bench-$label.txt" 2> /dev/null
  pkill -TERM -P $pid q38-server || true
  wait $pid || true
  pid=
  read -r wall user sys < "$dir/time-$label"
  echo "$label: server and workers, start to exit: wall $wall s, user $user s, system $sys s"
  awk -v label="$label" '$1 == "fixed_64" {printf "%-28s decode %s tok/s, tpot %s ms, prefill %s tok/s\n", label, $4, $8, $6}' "$dir/bench-$label.txt"
  grep -E "^(arithmetic|record_copy) " "$dir/bench-$label.txt" | awk -v label="$label" '{printf "%-28s health %s: %s\n", label, $1, $4}'
}
echo "== the server: four CPU worker processes, $model, the small-cpu contract benchmark (513 greedy tokens, warmup, 2 repeats)"
serve_and_bench "fast math, shm (default)" deploy/contracts/small-cpu.json
if [ -z "${Q38_SKIP_BEFORE:-}" ]; then
  # The same contract with the exact route: what the demo ran before the fast path and shm existed.
  sed 's/"cpu_fast"/"cpu_reference"/' deploy/contracts/small-cpu.json > "$dir/small-cpu-exact.json"
  serve_and_bench "exact math, gloo (before)" "$dir/small-cpu-exact.json" --cpu_math exact --cpu_comm gloo
fi
