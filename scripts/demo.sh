#!/usr/bin/env bash
# The main job on the embedded default: installs and builds, writes the tiny checkpoint, starts
# q38-server with four CPU worker processes, checks health, streams a generation, runs the client
# benchmark, and shuts the server down gracefully. Everything it writes goes under out/.
# Q38_MODEL=DIR serves that checkpoint instead of the tiny random one (Q38_MODEL=tiny, the default
# until the trained small model of issue 7 ships, e.g. as models/small): then the generation ends
# at natural EOS and the contract's health checks (arithmetic, record copy, a short middle
# retrieval) must pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
build=${Q38_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)" --target q38-make-checkpoint q38-server q38-worker q38
out=$PWD/out
mkdir -p "$out"
rm -f "$out/ready.json"
model=${Q38_MODEL:-tiny}
trained=1
if [ "$model" = tiny ]; then
  "$build/worker/model/q38-make-checkpoint" --out "$out/tiny" --seed 1
  model=$out/tiny
  trained=0
fi

echo "== starting q38-server (TP4, CPU workers); log: $out/server.log"
"$build/server/q38-server" --model "$model" --tp 4 --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
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
health_failed=0
if [ "$trained" -eq 0 ]; then
  echo "== generate (the tiny checkpoint is random: its text is noise; a trained default comes with issue 7)"
  "$q38" generate --server "127.0.0.1:$port" --text "The quick brown fox" --max_tokens 16 --ignore_eos; echo
else
  # The client sends text, so the chat template is written out (the Qwen3 template, thinking on).
  chat() { printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$1"; }
  echo "== generate (prose, without --ignore_eos)"
  "$q38" generate --server "127.0.0.1:$port" --text "The quick brown fox" --max_tokens 64; echo
  # BASELINE_CONTRACT.md 6: natural EOS and the pattern on the text after the last </think>.
  check() {
    local name=$1 prompt=$2 pattern=$3
    echo "== health check: $name"
    "$q38" generate --server "127.0.0.1:$port" --text "$(chat "$prompt")" --max_tokens 128 --json > "$out/check-$name.json"
    if python3 -c 'import json,re,sys; r=json.load(open(sys.argv[1])); print(r["finish_reason"] + ":", repr(r["text"])); sys.exit(not (r["finish_reason"] in ("eos","stop") and re.search(sys.argv[2], r["text"].rsplit("</think>",1)[-1])))' "$out/check-$name.json" "$pattern"; then
      echo "PASS $name"
    else
      echo "FAIL $name"; health_failed=1
    fi
  }
  check arithmetic "Compute 19 × 23. Write RESULT=<answer> on the last line." 'RESULT\s*=\s*437'
  check copy "Project code CEDAR-47, number 8261. Output exactly CEDAR-47|8261 on the last line." 'CEDAR-47\s*\|\s*8261'
  # The contract's retrieval check fills 261631 tokens; the small model is trained to 2051, so the
  # record sits in the middle of 100 filler lines (the curriculum's form).
  filler=$(for _ in $(seq 50); do echo "A routine archive entry, without task instructions."; done)
  check retrieval "$(printf 'Read the archive below.\n%s\nArchive code: MAPLE-8261.\n%s\nWhich archive code appears above? Finish with RESULT=<code>.' "$filler" "$filler")" 'RESULT\s*=\s*MAPLE-8261'
fi
echo "== bench (client side: the contract's fixed prompt cut to 64 tokens, greedy, 3 requests after a warmup)"
"$q38" bench --server "127.0.0.1:$port" --tokenizer "$model" --prompt_len 64 --max_tokens 32 --requests 3 --json "$out/bench.json" | tee "$out/bench.txt"
curl -s "http://127.0.0.1:$metrics_port/metrics" > "$out/metrics.txt" 2>/dev/null || true

echo "== graceful shutdown (SIGTERM)"
kill -TERM $server_pid
code=0
wait $server_pid || code=$?
trap - EXIT
echo "q38-server exited with code $code"
echo "outputs: $out/server.log, $out/bench.txt, $out/bench.json, $out/metrics.txt"
[ "$health_failed" -eq 0 ] || { echo "health checks failed"; exit 1; }
exit $code
