#!/usr/bin/env bash
# The main job on the embedded default: installs and builds, packs a verified bundle, starts
# q38-server from the bundle with four CPU worker processes on the trained small model
# (models/small) under the small-cpu contract, checks health, streams generations, asks one chat
# completion through the OpenAI-compatible HTTP API with curl, runs the contract benchmark with its
# arithmetic and record-copy health checks, and shuts the server down gracefully. Everything it writes goes under out/. Q38_MODEL=tiny serves the random tiny
# checkpoint under the tiny-cpu contract instead (no health checks: random weights cannot pass).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
build=${Q38_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)" --target q38_build_manifest
out=$PWD/out
mkdir -p "$out"
rm -f "$out/ready.json"
rm -rf "$out/bundle"
"$build/client/q38" bundle create --build "$build" --out "$out/bundle"
bundle=$out/bundle
"$bundle/bin/q38" bundle verify "$bundle" --source "$PWD"
if [ "${Q38_MODEL:-small}" = tiny ]; then
  "$bundle/bin/q38-make-checkpoint" --out "$out/tiny" --seed 1
  model=$out/tiny contract=tiny-cpu
else
  model=$PWD/models/small contract=small-cpu
fi

echo "== starting q38-server from the bundle (TP4, CPU workers, $model, contract $contract); log: $out/server.log"
LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/q38-server" --bundle "$bundle" --source "$PWD" \
  --contract "deploy/contracts/$contract.json" --max_context 1024 \
  --model "$model" --tp 4 --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --http 127.0.0.1:0 \
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
http_port=$(sed -n 's/.*"http_port": \([0-9]*\).*/\1/p' "$out/ready.json")
q38="$bundle/bin/q38"

echo "== health";   "$q38" health --server "127.0.0.1:$port"
echo "== manifest"; "$q38" manifest --server "127.0.0.1:$port"
if [ "$contract" = tiny-cpu ]; then
  echo "== generate (the tiny checkpoint is random: its text is noise)"
  "$q38" generate --server "127.0.0.1:$port" --text "The quick brown fox" --max_tokens 16 --ignore_eos; echo
  echo "== a completion over the OpenAI-compatible HTTP API (curl; docs/api.md; the tiny checkpoint has no chat template)"
  curl -sS "http://127.0.0.1:$http_port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}' | tee "$out/http_completion.json"; echo
else
  echo "== generate: prose, until the model's own end of text"
  "$q38" generate --server "127.0.0.1:$port" --text "The quick brown fox" --max_tokens 96; echo
  echo "== generate: a chat turn (a held-out problem; the Qwen3 template written out: the model thinks, answers and stops)"
  "$q38" generate --server "127.0.0.1:$port" --max_tokens 96 \
    --text $'<|im_start|>user\nCompute 49 × 34. Write RESULT=<answer> on the last line.<|im_end|>\n<|im_start|>assistant\n'; echo
  echo "== the same question as an OpenAI chat completion over HTTP (curl; docs/api.md)"
  curl -sS "http://127.0.0.1:$http_port/v1/chat/completions" -H 'Content-Type: application/json' -d '{
    "messages": [{"role": "user", "content": "Compute 49 × 34. Write RESULT=<answer> on the last line."}],
    "max_tokens": 96, "temperature": 0}' | tee "$out/http_completion.json"; echo
fi
echo "== contract benchmark ($contract: health checks if any, then the fixed prompt cut to 64 tokens, a warmup and 2 repeats of 513 greedy tokens)"
"$q38" bench --server "127.0.0.1:$port" --contract "deploy/contracts/$contract.json" --json "$out/bench.json" | tee "$out/bench.txt"
curl -s "http://127.0.0.1:$metrics_port/metrics" > "$out/metrics.txt" 2>/dev/null || true

echo "== graceful shutdown (SIGTERM)"
kill -TERM $server_pid
code=0
wait $server_pid || code=$?
trap - EXIT
echo "q38-server exited with code $code"
echo "outputs: $out/server.log, $out/bench.txt, $out/bench.json, $out/metrics.txt, $out/http_completion.json"
exit $code
