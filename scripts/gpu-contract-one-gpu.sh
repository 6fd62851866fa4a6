#!/usr/bin/env bash
# The trained small model under deploy/contracts/small-cuda.json through the real server at TP4
# with every worker process on GPU 0 (--gpus 0,0,0,0, joined by CUDA IPC): the contract benchmark
# with its arithmetic and record-copy health checks, then SIGTERM, and the GPU's memory in use
# before and after. Prints a few summary lines; the report and logs go to OUT/contract-one-gpu/.
# Exits non-zero when the server fails to start, the benchmark or a health check fails, or the
# server does not stop cleanly.
# Usage: scripts/gpu-contract-one-gpu.sh PACKED_DIR OUT
set -uo pipefail
cd "$(dirname "$0")/.."
packed=$1
dir=$2/contract-one-gpu
mkdir -p "$dir"
bin=$packed/bin
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0; }
before=$(used)
"$bin/q38-server" --model models/small --tp 4 --device cuda --gpus 0,0,0,0 --max_context 1024 \
  --contract deploy/contracts/small-cuda.json --listen 127.0.0.1:0 --metrics= --ready_file "$dir/ready.json" \
  > "$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 1 1200); do
  [[ -f $dir/ready.json ]] && break
  kill -0 $server 2>/dev/null || { echo "contract on one GPU: q38-server exited during startup"; tail -5 "$dir/server.log"; exit 1; }
  sleep 0.1
done
[[ -f $dir/ready.json ]] || { echo "contract on one GPU: q38-server not ready in 120 s"; kill -KILL $server; exit 1; }
port=$(sed -n 's/.*"grpc_port": \([0-9]*\).*/\1/p' "$dir/ready.json")
during=$(used)
grep -m4 "communicator" "$dir/server.log" | sed 's/^/  /'
timeout 600 "$bin/q38" bench --server "127.0.0.1:$port" --contract deploy/contracts/small-cuda.json \
  --json "$dir/bench.json" > "$dir/bench.txt" 2>&1
rc=$?
echo "contract small-cuda at TP4 on one GPU: q38 bench exit $rc"
sed 's/^/  /' "$dir/bench.txt" | tail -12
kill -TERM $server
wait $server
stop=$?
sleep 2
echo "  q38-server exited with $stop after SIGTERM; GPU 0 memory in use: $before MiB before, $during serving, $(used) after"
[[ $rc -eq 0 && $stop -eq 0 ]]
