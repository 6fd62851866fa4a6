#!/usr/bin/env python3
"""Client-side TPOT of q38's HTTP API (docs/api.md), as `q38 bench` measures it over gRPC: greedy
streamed completions of a token-id prompt that run to max_tokens, each token's arrival taken when
its server-sent event is read (tokens counted by their logprobs entries, so text held back
mid-character counts too); TPOT = (last arrival − first) / (tokens − 1). Prints the median over the
requests in ms, after one warmup request. Standard library only.

  http_tpot.py --port P --tokens 1,2,3 --max_tokens 64 [--requests 3]
"""
import argparse
import http.client
import json
import statistics
import time


def tpot_ms(port, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "logprobs": 0})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"HTTP {resp.status}: {resp.read()!r}")
    first = last = None
    count = 0
    for line in resp:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        now = time.perf_counter()
        lp = json.loads(line[6:])["choices"][0].get("logprobs")
        n = len(lp["tokens"]) if lp else 0
        if n:
            first = now if first is None else first
            last = now
            count += n
    conn.close()
    if count != max_tokens:
        raise SystemExit(f"{count} tokens streamed, {max_tokens} asked")
    return 1e3 * (last - first) / (count - 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--max_tokens", type=int, required=True)
    p.add_argument("--requests", type=int, default=3)
    a = p.parse_args()
    prompt = [int(t) for t in a.tokens.split(",")]
    tpot_ms(a.port, prompt, a.max_tokens)  # warmup
    print(f"{statistics.median(tpot_ms(a.port, prompt, a.max_tokens) for _ in range(a.requests)):.3f}")


if __name__ == "__main__":
    main()
