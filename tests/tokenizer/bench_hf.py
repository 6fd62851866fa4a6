#!/usr/bin/env python3
"""Times Hugging Face `tokenizers` encoding the benchmark corpus single-threaded.

The counterpart of build-tok/tokenizer/tokenizer_bench: same corpus file (JSON lines, one
document each, from make_fixture.py --bench-corpus), same loop (one encode per document, no
batching, no special tokens added), same report (each run, then the median).

  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \\
      python3 tests/tokenizer/bench_hf.py tests/fixtures/qwen3-tokenizer /tmp/tok_bench.jsonl 5
"""

import json
import os
import statistics
import sys
import time

# Single-threaded: tokenizers would otherwise use a Rayon pool (only for batch calls, but make sure).
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402  (after the environment is set)
import tokenizers  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} TOKENIZER_DIR CORPUS.jsonl [RUNS]")
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    tok = Tokenizer.from_file(os.path.join(sys.argv[1], "tokenizer.json"))
    with open(sys.argv[2], encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    times = []
    tokens = 0
    for r in range(runs):
        tokens = 0
        start = time.perf_counter()
        for d in docs:
            tokens += len(tok.encode(d, add_special_tokens=False).ids)
        t = time.perf_counter() - start
        times.append(t)
        print(f"run {r + 1}: {t:.3f} s  {nbytes / t / 1e6:.2f} MB/s  {tokens / t:.0f} tokens/s")
    med = statistics.median(times)
    print(f"HF tokenizers {tokenizers.__version__}: {len(docs)} documents, {nbytes} bytes, {tokens} tokens")
    print(f"median of {runs} runs: {med:.3f} s  {nbytes / med / 1e6:.2f} MB/s  {tokens / med:.0f} tokens/s")


if __name__ == "__main__":
    main()
