#!/usr/bin/env bash
# The main job on the embedded default: installs and builds, writes the tiny checkpoint, starts
# q38-server with four CPU worker processes, checks health, streams a generation, runs the client
# benchmark, and shuts the server down gracefully. Everything it writes goes under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
build=${Q38_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)" --target q38-make-checkpoint q38-server q38-worker q38
out=$PWD/out
mkdir -p "$out"
rm -f "$out/ready.json"
"$build/worker/model/q38-make-checkpoint" --out "$out/tiny" --seed 1

echo "== starting q38-server (TP4, CPU workers); log: $out/server.log"
"$build/server/q38-server" --model "$out/tiny" --tp 4 --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
  --ready_file "$out/ready.json" > "$out/server.log" 2>&1 &
server_pid=$!
trap 'kill -KILL $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  [ -f "$out/ready.json" ] && break
  kill -0 $server_pid 2>/dev/null || { echo "q38-server exited during startup:"; tail -20 "$out/server.log"; exit 1; }
  sleep 0.1
done
port=$(sed -n 's/.*"grpc_port": \([0-9]*\).*/\1/p' "$out/ready.json")
metrics_port=$(sed -n 's/.*"metrics_port": \([0-9]*\).*/\1/p' "$out/ready.json")
q38="$build/client/q38"

echo "== health";   "$q38" health --server "127.0.0.1:$port"
echo "== manifest"; "$q38" manifest --server "127.0.0.1:$port"
echo "== generate (the tiny checkpoint is random: its text is noise; a trained default comes with issue 7)"
"$q38" generate --server "127.0.0.1:$port" --text "The quick brown fox" --max_tokens 16 --ignore_eos; echo
echo "== bench (client side: the contract's fixed prompt cut to 64 tokens, greedy, 3 requests after a warmup)"
"$q38" bench --server "127.0.0.1:$port" --tokenizer "$out/tiny" --prompt_len 64 --max_tokens 32 --requests 3 --json "$out/bench.json" | tee "$out/bench.txt"
curl -s "http://127.0.0.1:$metrics_port/metrics" > "$out/metrics.txt" 2>/dev/null || true

echo "== graceful shutdown (SIGTERM)"
kill -TERM $server_pid
code=0
wait $server_pid || code=$?
trap - EXIT
echo "q38-server exited with code $code"
echo "outputs: $out/server.log, $out/bench.txt, $out/bench.json, $out/metrics.txt"
exit $code
