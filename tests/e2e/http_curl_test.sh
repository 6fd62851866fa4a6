#!/usr/bin/env bash
# The HTTP API's wire format (docs/api.md) as curl sees it, on the real q38-server with one CPU
# worker and the random tiny checkpoint: server-sent-event framing, OpenAI error bodies for
# malformed, unrouted, oversized and refused requests, 429 when the queue is full, 503 from
# /health and for new requests while draining, and a graceful SIGTERM that closes the port.
#   http_curl_test.sh Q38_SERVER Q38_WORKER Q38_MAKE_CHECKPOINT [SMALL_MODEL, unused]
set -euo pipefail
server_bin=$1 worker_bin=$2 make_checkpoint=$3

tmp=$(mktemp -d /tmp/q38_http_curl_XXXXXX)
server_pid=""
on_exit() {
  local rc=$?
  if [ -n "$server_pid" ]; then kill -KILL "$server_pid" 2>/dev/null || true; fi
  if [ "$rc" -ne 0 ] && [ -f "$tmp/server.log" ]; then
    echo "---- server log tail ----"; tail -40 "$tmp/server.log"; echo "---- end ----"
  fi
  rm -rf "$tmp"
}
trap on_exit EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$make_checkpoint" --out="$tmp/tiny" --seed=1 > /dev/null
"$server_bin" --model="$tmp/tiny" --tp=1 --listen=127.0.0.1:0 --metrics=127.0.0.1:0 --http=127.0.0.1:0 \
  --worker_binary="$worker_bin" --run_dir="$tmp/run" --ready_file="$tmp/ready.json" --startup_timeout_s=60 \
  --max_request_bytes=4096 --queue_size=1 --drain_timeout_s=30 > "$tmp/server.log" 2>&1 &
server_pid=$!
# Ready once the file parses and names the HTTP port (it may be seen half written).
port=""
for _ in $(seq 1 1200); do
  port=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["http_port"])' "$tmp/ready.json" 2>/dev/null) && break
  kill -0 "$server_pid" 2>/dev/null || fail "q38-server exited during startup"
  sleep 0.1
done
[ -n "$port" ] || fail "q38-server wrote no ready file in 120 s"
base=http://127.0.0.1:$port
metrics_port=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics_port"])' "$tmp/ready.json")
echo "PASS server ready, HTTP on port $port"

# metric SERIES: the value of one series on /metrics (the name with its labels), empty if absent.
metric() {
  curl -sS --noproxy '*' --max-time 10 "http://127.0.0.1:$metrics_port/metrics" |
    awk -v series="$1" 'index($0, series " ") == 1 {print $2}'
}
metric_is() { [ "$(metric "$1")" = "$2" ]; }

# eventually TRIES PAUSE COMMAND...: COMMAND until it succeeds, at most TRIES times PAUSE s apart.
eventually() {
  local tries=$1 pause=$2; shift 2
  for _ in $(seq 1 "$tries"); do "$@" && return 0; sleep "$pause"; done
  return 1
}

# request METHOD PATH [curl args...]: the body goes to $tmp/body, the status to $status.
request() {
  local method=$1 path=$2; shift 2
  status=$(curl -sS --noproxy '*' --max-time 60 -o "$tmp/body" -w '%{http_code}' -X "$method" "$base$path" "$@")
}
post_json() { request POST "$1" -H 'Content-Type: application/json' --data-binary "$2"; }

# expect_error STATUS TYPE [PARAM]: the last answer is OpenAI's error body with these.
expect_error() {
  [ "$status" = "$1" ] || fail "status $status, want $1: $(head -c 500 "$tmp/body")"
  python3 - "$tmp/body" "$2" "${3-}" <<'EOF' || fail "error body: $(head -c 500 "$tmp/body")"
import json, sys
path, want_type, want_param = sys.argv[1:]
body = json.load(open(path))
err = body["error"]
assert isinstance(err.get("message"), str) and err["message"], f"no error.message in {body}"
assert err.get("type") == want_type, f"error.type {err.get('type')!r}, want {want_type!r}"
assert not want_param or err.get("param") == want_param, f"error.param {err.get('param')!r}, want {want_param!r}"
EOF
}

# A streaming completion: one `data: ` line per event, blank lines between, `data: [DONE]` last.
curl -sS --noproxy '*' --max-time 60 -N -D "$tmp/headers" -o "$tmp/sse" "$base/v1/completions" \
  -H 'Content-Type: application/json' \
  --data-binary '{"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0, "ignore_eos": true, "stream": true}'
grep -qi '^content-type: text/event-stream' "$tmp/headers" || fail "streaming Content-Type: $(grep -i '^content-type' "$tmp/headers")"
python3 - "$tmp/sse" <<'EOF' || fail "SSE framing of: $(head -c 2000 "$tmp/sse")"
import json, sys
raw = open(sys.argv[1], newline="").read().replace("\r\n", "\n")  # SSE allows either line end
assert "\r" not in raw, "a bare CR in the stream"
assert raw.endswith("\n\n"), "the stream does not end with a blank line"
events = raw[:-2].split("\n\n")
assert all(events), "two blank lines in a row"
for e in events:
    for line in e.split("\n"):
        assert line.startswith("data: "), f"a line that is not data: {line!r}"
assert events[-1] == "data: [DONE]", f"last event {events[-1]!r}"
chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
assert chunks, "no chunk before [DONE]"
assert all(c["object"] == "text_completion" for c in chunks), "a chunk not of object text_completion"
assert chunks[-1]["choices"][0]["finish_reason"] == "length", f"last chunk {chunks[-1]}"
EOF
echo "PASS streaming completion: text/event-stream, data: events, data: [DONE] last"

post_json /v1/completions '{"prompt": "hello", "max_tokens": '
expect_error 400 invalid_request_error
echo "PASS malformed JSON: 400 with an error body"

request GET /v1/nope
expect_error 404 not_found_error
echo "PASS unknown route: 404 with an error body"

# Over --max_request_bytes 4096. No Expect: 100-continue, so the body is sent whatever the answer.
python3 -c 'import json; print(json.dumps({"prompt": "a" * 5000, "max_tokens": 1}), end="")' > "$tmp/big.json"
request POST /v1/completions -H 'Content-Type: application/json' -H 'Expect:' --data-binary "@$tmp/big.json"
expect_error 413 invalid_request_error
echo "PASS 5000-byte body: 413 with an error body"

post_json /v1/completions '{"prompt": "hello", "max_tokens": 4, "n": 3}'
expect_error 400 invalid_request_error n
echo "PASS n=3: 400 naming param n"

request GET /v1/models
[ "$status" = 200 ] || fail "GET /v1/models: $status $(head -c 500 "$tmp/body")"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert [m["id"] for m in d["data"]] == ["tiny"], d' "$tmp/body" \
  || fail "GET /v1/models body: $(head -c 500 "$tmp/body")"
echo "PASS GET /v1/models: 200, the tiny model"

# long_stream NAME: a greedy streamed completion of 3,000 tokens in the background, its events in
# $tmp/NAME; returns once its first event has arrived.
long_stream() {
  curl -sS --noproxy '*' --max-time 120 -N -o "$tmp/$1" "$base/v1/completions" -H 'Content-Type: application/json' \
    --data-binary '{"prompt": "The quick brown fox", "max_tokens": 3000, "temperature": 0, "ignore_eos": true, "stream": true}' &
  eval "$1_pid=$!"
  for _ in $(seq 1 100); do [ -s "$tmp/$1" ] && return 0; sleep 0.05; done
  fail "no event from the long stream $1"
}

# One request runs and --queue_size 1 holds one more: the next is 429, and the two clients that
# leave cancel theirs, so the server answers again within moments (it looks at each client's
# socket every 20 ms, and a running request stops at its next step).
long_stream running
curl -sS --noproxy '*' --max-time 120 -N -o "$tmp/queued" "$base/v1/completions" -H 'Content-Type: application/json' \
  --data-binary '{"prompt": "x", "max_tokens": 3000, "ignore_eos": true, "stream": true}' &
queued_pid=$!
eventually 100 0.1 metric_is q38_num_requests_waiting 1 || true  # the 429 below says whether it came
post_json /v1/completions '{"prompt": "hello", "max_tokens": 4}'
expect_error 429 rate_limit_error
echo "PASS a full queue: 429 rate_limit_error"
kill "$running_pid" "$queued_pid" 2>/dev/null || true
wait "$running_pid" "$queued_pid" 2>/dev/null || true
not_refused() {
  post_json /v1/completions '{"prompt": "hello", "max_tokens": 4, "temperature": 0}'
  [ "$status" != 429 ]
}
eventually 50 0.1 not_refused || true
[ "$status" = 200 ] || fail "after the clients left: $status $(head -c 500 "$tmp/body")"
cancelled='q38_requests_cancelled_total{by="client"}'
eventually 20 0.1 metric_is "$cancelled" 2 || fail "$cancelled is '$(metric "$cancelled")', want 2"  # counted as each handler returns
echo "PASS clients that leave cancel their requests: both counted as cancelled by the client, the next one served"

# Draining: SIGTERM while a stream runs; /health and new requests get 503 until the stream ends.
long_stream draining
kill -TERM "$server_pid"
draining() {
  request GET /health
  [ "$status" = 503 ]
}
eventually 100 0.05 draining || fail "/health while draining: $status"  # the signal is handled within moments
post_json /v1/completions '{"prompt": "hello", "max_tokens": 4}'
expect_error 503 service_unavailable
echo "PASS while draining: /health and a new completion are 503"
wait "$draining_pid" || fail "the stream in flight at SIGTERM failed"
tail -c 14 "$tmp/draining" | grep -q 'data: \[DONE\]' || fail "the stream in flight did not end with [DONE]: $(tail -c 300 "$tmp/draining")"
echo "PASS the stream in flight at SIGTERM ran to its end"
code=0
wait "$server_pid" || code=$?
server_pid=""
[ "$code" = 0 ] || fail "q38-server exited with code $code after SIGTERM, want 0"
echo "PASS SIGTERM: exit code 0"
curl_rc=0
curl -sS --noproxy '*' --max-time 5 -o /dev/null "$base/health" 2>/dev/null || curl_rc=$?
[ "$curl_rc" = 7 ] || fail "after shutdown curl exited $curl_rc, want 7 (connection refused)"
echo "PASS after shutdown the HTTP port refuses connections"
