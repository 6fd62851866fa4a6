#!/usr/bin/env bash
# What the server path adds per token: TPOT through q38-server (measured by the q38 client)
# against TPOT of the model runner's own decode loop (q38-bench-model), same tiny model, same TP,
# same machine, alternating the two within one run. Prints each round, the medians, and the
# median of the rounds' differences with a 95% interval. Above TP1
# the runner's ranks meet over shared memory (--cpu_comm shm) as the server's worker processes do
# by default, so the difference is the server path and not the transport.
# compare=http: the HTTP front end (scripts/http_tpot.py, streamed completions) against the gRPC one
# (q38 bench) on the same server, the same prompt ids; both ask each token's logprob, so both
# count the tokens of every message alike.
# Usage: scripts/bench-server-overhead.sh [rounds=5] [tp=1] [compare=runner|http]
# Q38_BIN_DIR=DIR takes the binaries from DIR instead of building them.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tp=${2:-1}
compare=${3:-runner}
[ "$compare" = runner ] || [ "$compare" = http ] || { echo "compare must be runner or http" >&2; exit 64; }
if [ -n "${Q38_BIN_DIR:-}" ]; then
  bin() { echo "$Q38_BIN_DIR/$1"; }
else
  build=${Q38_BUILD_DIR:-build}
  cmake --build "$build" --target q38-make-checkpoint q38-server q38-worker q38 q38-bench-model > /dev/null
  bin() { find "$build" -name "$1" -type f -perm -u+x | head -1; }
fi
dir=$(mktemp -d)
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
"$(bin q38-make-checkpoint)" --out "$dir/tiny" --seed 1 > /dev/null
"$(bin q38-server)" --model "$dir/tiny" --tp "$tp" --listen 127.0.0.1:0 --metrics "" --http 127.0.0.1:0 \
  --worker_binary "$(bin q38-worker)" --ready_file "$dir/ready.json" > "$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -f "$dir/ready.json" ] && break; sleep 0.1; done
port=$(sed -n 's/.*"grpc_port": \([0-9]*\).*/\1/p' "$dir/ready.json")
http_port=$(sed -n 's/.*"http_port": \([0-9]*\).*/\1/p' "$dir/ready.json")
prompt=$(seq 0 63 | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 1000}')
if [ "$compare" = runner ]; then base_name=runner other_name=server; else base_name=gRPC other_name=HTTP; fi
base=() other=()
for i in $(seq 1 "$rounds"); do
  if [ "$compare" = runner ]; then
    # q38-bench-model's table: "TP prefill decode TPOT"; q38 bench's: "tpot requests n mean p50 ...".
    b=$("$(bin q38-bench-model)" --model "$dir/tiny" --tp "$tp" --cpu_comm shm --prompt_tokens 64 --decode_tokens 64 --repeats 3 |
        awk -v tp="$tp" '$1 == tp && NF == 4 {print $4}')
    o=$("$(bin q38)" bench --server "127.0.0.1:$port" --prompt_len 64 --max_tokens 64 --requests 3 2> /dev/null |
        awk '$1 == "tpot" {print $5}')
  else
    b=$("$(bin q38)" bench --server "127.0.0.1:$port" --tokens "$prompt" --max_tokens 64 --requests 3 --logprobs 0 2> /dev/null |
        awk '$1 == "tpot" {print $5}')
    o=$(python3 scripts/http_tpot.py --port "$http_port" --tokens "$prompt" --max_tokens 64 --requests 3)
  fi
  base+=("$b") other+=("$o")
  printf 'round %d: %s TPOT %.3f ms, %s TPOT %.3f ms\n' "$i" "$base_name" "$b" "$other_name" "$o"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mr=$(median "${base[@]}") ms=$(median "${other[@]}")
awk -v r="$mr" -v s="$ms" -v tp="$tp" -v b="$base_name" -v o="$other_name" \
  'BEGIN {printf "TP%d median %s TPOT %.3f ms, %s TPOT %.3f ms, the %s path adds %.3f ms (%.1f%%)\n", tp, b, r, o, s, o, s - r, 100 * (s - r) / r}'
# The rounds pair the two measurements in time, so drift of the machine cancels in each round's
# difference. The median difference, with a distribution-free 95% interval from the order
# statistics (binomial, p = 1/2), as a share of the runner's median TPOT.
for i in "${!base[@]}"; do echo "${other[$i]} ${base[$i]}"; done | awk '{print $1 - $2}' | sort -g |
  awk -v r="$mr" -v tp="$tp" '
    function choose(n, k,  c, i) { c = 1; for (i = 1; i <= k; i++) c = c * (n - k + i) / i; return c }
    { d[NR] = $1 }
    END {
      n = NR; med = (n % 2) ? d[(n + 1) / 2] : (d[n / 2] + d[n / 2 + 1]) / 2
      # the largest j with P(Binomial(n, 1/2) < j) <= 2.5%: [d_j, d_(n+1-j)] covers the median
      j = 0; cum = 0
      for (k = 0; k < n; k++) { cum += choose(n, k) / 2 ^ n; if (cum > 0.025) break; j = k + 1 }
      if (j < 1) { printf "TP%d paired: median difference %.3f ms (%.1f%%); too few rounds for a 95%% interval\n", tp, med, 100 * med / r; exit }
      printf "TP%d paired: median difference %.3f ms (%.1f%%), 95%% interval [%.3f, %.3f] ms ([%.1f%%, %.1f%%]) over %d rounds\n",
        tp, med, 100 * med / r, d[j], d[n + 1 - j], 100 * d[j] / r, 100 * d[n + 1 - j] / r, n
    }'
