#!/usr/bin/env python3
"""Evaluates checkpoints through the real server: q38-server with CPU ranks, the q38 client.

  python3 train/eval_server.py --model bf16=DIR [--model nvfp4=DIR ...] [--build build]
                               [--tp 1,4] [--device cpu|cuda] [--n 100] [--kinds arithmetic,copy,retrieval] [--out DIR]

For every checkpoint and TP size it starts q38-server (CPU ranks, or one GPU per rank), sends the curriculum's held-out prompts
(seed 0 of the eval split; retrieval with the record at the middle of its filler lines) as the
rendered chat template, with the checkpoint's sampling (generation_config.json; greedy for the
small model) and natural EOS, and scores each answer:
  answer  finished by EOS, and the last line after </think> is the curriculum's final line
          (RESULT=<n>, Code: CODE|NUMBER, RESULT = <code>): stricter than the contract's search
  exact   finished by EOS, and the whole completion (think block included) is the curriculum's
Writes OUT/eval.json (every request and the summary) and OUT/eval.md (the table). Any failed
request, a server that does not start, or a prompt the server tokenizes differently from the
checkpoint's tokenizer.json stops the run with an error. Needs `tokenizers` (pip).
"""

import argparse
import concurrent.futures
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import curriculum  # noqa: E402

KINDS = ("arithmetic", "copy", "retrieval")
# The bar of docs/contract.md §8.3 for the quantized model (fraction right with natural EOS).
TARGETS = {"arithmetic": 0.95, "copy": 0.99, "retrieval": 0.95}
NATURAL = ("eos", "stop")  # stop: a stop id or string; the evaluation sends none, so in practice eos
ABORT = threading.Event()
SLACK = 32  # tokens past the expected answer, so a longer wrong answer still shows how it ends


class EvalError(RuntimeError):
    pass


def held_out_prompts(kind, n, seed=0):
    """The first n held-out examples of `kind`. Arithmetic and copy come from the eval stream as in
    train.py; retrieval is drawn with the record exactly at the middle (the contract's check)."""
    if kind == "retrieval":
        rng = random.Random(f"eval-middle:{seed}")
        return [curriculum.retrieval(rng, "eval", position=0.5) for _ in range(n)]
    out = []
    for e in curriculum.examples(seed, "eval"):
        if e.kind == kind:
            out.append(e)
            if len(out) == n:
                return out


def two_digit_mul(prompt):
    m = re.search(r"(\d+) × (\d+)", prompt)
    return bool(m) and all(10 <= int(x) <= 99 for x in m.groups())


def final_line(text):
    """The last non-empty line after the last </think> (the contract's rule)."""
    tail = text.rsplit("</think>", 1)[-1]
    lines = [l.strip() for l in tail.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def score(example, result):
    natural = result["finish_reason"] in NATURAL
    expected = example.answer.removesuffix("<|im_end|>")
    return {"natural": natural,
            "answer": natural and final_line(result["text"]) == example.expect,
            "exact": natural and result["text"] == expected}


def tool(build, folder, name):
    """A binary of a build tree (build/folder/name) or of a flat folder of packed binaries."""
    path = os.path.join(build, folder, name)
    return path if os.path.exists(path) else os.path.join(build, name)


class Server:
    """q38-server on an ephemeral port; stopped with SIGTERM, and its exit code checked."""

    def __init__(self, build, model, tp, device, log_path, startup_s):
        self.build, self.log_path = build, log_path
        run_dir = tempfile.mkdtemp(prefix="q38-eval-")
        self.ready = os.path.join(run_dir, "ready.json")
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [tool(build, "server", "q38-server"), "--model", model, "--tp", str(tp), "--device", device,
             "--listen", "127.0.0.1:0", "--metrics=", "--ready_file", self.ready,
             "--startup_timeout_s", str(startup_s)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + startup_s + 30
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None:
                raise EvalError(f"q38-server exited with {self.proc.returncode} during startup:\n{self.tail()}")
            if time.time() > deadline:
                self.proc.kill()
                raise EvalError(f"q38-server not ready after {startup_s + 30} s:\n{self.tail()}")
            time.sleep(0.1)
        time.sleep(0.05)  # the ready file is written whole, but give a racing reader a moment
        with open(self.ready) as f:
            self.addr = f"127.0.0.1:{json.load(f)['grpc_port']}"

    def tail(self, n=20):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def client(self, *args, timeout):
        cmd = [tool(self.build, "client", "q38"), *args, "--server", self.addr]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise EvalError(f"q38 {args[0]} exited with {p.returncode}: {p.stderr.strip()}\nserver log:\n{self.tail()}")
        return p.stdout

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise EvalError("q38-server did not stop within 60 s of SIGTERM")
        self.log.close()
        if self.proc.returncode != 0:
            raise EvalError(f"q38-server exited with {self.proc.returncode}:\n{self.tail()}")


def sampling_flags(model_dir):
    """The checkpoint's sampling: greedy unless generation_config.json samples."""
    with open(os.path.join(model_dir, "generation_config.json")) as f:
        g = json.load(f)
    if not g.get("do_sample", False):
        return [], "greedy"
    flags = [f"--temperature={g.get('temperature', 1.0)}", f"--top_k={g.get('top_k', 0)}",
             f"--top_p={g.get('top_p', 1.0)}", "--seed=0"]
    return flags, " ".join(flags)


def run_one(args, name, model_dir, tp, sets):
    """Every prompt of every kind through one server; returns (records, summary)."""
    flags, sampling = sampling_flags(model_dir)
    t0 = time.time()
    server = Server(args.build, model_dir, tp, args.device, os.path.join(args.out, f"server-{name}-tp{tp}.log"),
                    args.startup_s)
    try:
        t_ready = time.time()
        server.client("health", timeout=30)
        info = json.loads(server.client("info", "--json", timeout=30))
        manifest = json.loads(server.client("manifest", "--json", timeout=30))
        if not info.get("has_tokenizer"):
            raise EvalError(f"{model_dir}: the server found no tokenizer")
        records = []
        for kind in args.kinds:
            for i, (e, p_ids, a_ids) in enumerate(sets[kind]):
                if ABORT.is_set():
                    raise EvalError("stopped: another run failed")
                out = server.client("generate", "--text", e.prompt, f"--max_tokens={len(a_ids) + SLACK}",
                                    f"--timeout_s={args.request_timeout_s}", "--json", *flags,
                                    timeout=args.request_timeout_s + 30)
                r = json.loads(out)
                if r["usage"]["prompt_tokens"] != len(p_ids):
                    raise EvalError(f"{kind} #{i}: the server tokenized the prompt to {r['usage']['prompt_tokens']} "
                                    f"tokens, the checkpoint's tokenizer.json to {len(p_ids)}")
                if r["finish_reason"] not in NATURAL + ("length",):
                    raise EvalError(f"{kind} #{i}: finish reason {r['finish_reason']}")
                rec = {"kind": kind, "i": i, "text": r["text"], "tokens": r["tokens"],
                       "finish_reason": r["finish_reason"], "prompt_tokens": len(p_ids),
                       "completion_tokens": r["usage"]["completion_tokens"], "e2e_s": r["timings"]["e2e"],
                       **score(e, r)}
                if kind == "arithmetic":
                    rec["two_digit_mul"] = two_digit_mul(e.prompt)
                records.append(rec)
        t_done = time.time()
    except BaseException:
        server.kill()
        raise
    server.stop()
    summary = {"model": name, "dir": os.path.abspath(model_dir), "tp": tp, "device": args.device, "sampling": sampling,
               "build_id": manifest.get("build_id"), "fingerprint": manifest["workers"][0]["model"]["fingerprint"],
               "startup_s": round(t_ready - t0, 2), "requests_s": round(t_done - t_ready, 2),
               "kinds": summarize(records)}
    return records, summary


def summarize(records):
    groups = {}
    for r in records:
        groups.setdefault(r["kind"], []).append(r)
        if r.get("two_digit_mul"):
            groups.setdefault("arithmetic: two-digit ×", []).append(r)
    out = {}
    for kind, rs in groups.items():
        n = len(rs)
        out[kind] = {"n": n, "answer": sum(r["answer"] for r in rs) / n, "exact": sum(r["exact"] for r in rs) / n,
                     "natural_eos": sum(r["natural"] for r in rs) / n,
                     "mean_completion_tokens": round(sum(r["completion_tokens"] for r in rs) / n, 1)}
    return out


def tp_agreement(runs):
    """Per model: the fraction of prompts whose tokens are identical at every TP size."""
    by_model = {}
    for s, recs in runs:
        by_model.setdefault(s["model"], []).append([r["tokens"] for r in recs])
    return {m: sum(len({json.dumps(x) for x in col}) == 1 for col in zip(*lists)) / len(lists[0])
            for m, lists in by_model.items() if len(lists) > 1}


def markdown(report):
    runs = report["runs"]
    cols = [f"{s['model']} TP{s['tp']}" for s in runs]
    kinds = list(dict.fromkeys(k for s in runs for k in s["kinds"]))
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    ranks = "GPU ranks" if runs[0].get("device") == "cuda" else "CPU ranks"
    lines = [f"Held-out prompts through `q38-server` ({ranks}) and `q38 generate --text` (the rendered chat "
             f"template), the checkpoint's sampling, natural EOS; {report['n']} per kind (seed 0 of the eval split, "
             f"retrieval with the record at the middle). *answer*: EOS and the last line after `</think>` is the "
             f"expected one; *exact*: EOS and the whole completion is the curriculum's.", "",
             "| kind | n | target | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    cell = lambda s, k, f: "—" if k not in s["kinds"] else f(s["kinds"][k])  # noqa: E731
    for k in kinds:
        n = max(s["kinds"].get(k, {}).get("n", 0) for s in runs)
        target = f"≥ {pct(TARGETS[k])}" if k in TARGETS else ""
        lines.append(f"| {k} | {n} | {target} | " + " | ".join(cell(s, k, lambda v: pct(v["answer"])) for s in runs) + " |")
    lines += ["", "*exact* / natural EOS:", "", "| kind | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for k in kinds:
        lines.append(f"| {k} | " + " | ".join(
            cell(s, k, lambda v: f"{pct(v['exact'])} / {pct(v['natural_eos'])}") for s in runs) + " |")
    lines += ["", "| run | sampling | startup s | requests s | model fingerprint |", "|---|---|---|---|---|"]
    for c, s in zip(cols, runs):
        lines.append(f"| {c} | {s['sampling']} | {s['startup_s']} | {s['requests_s']} | `{s['fingerprint']}` |")
    if report["tp_agreement"]:
        lines += ["", "Identical tokens at every TP size: " +
                  ", ".join(f"{m} {pct(v)}" for m, v in report["tp_agreement"].items()) + "."]
    lines += ["", f"Build `{runs[0]['build_id']}`; total {report['total_s']:.0f} s; command: `{report['command']}`."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                    help="a checkpoint to evaluate (repeat for side-by-side columns, e.g. bf16=... nvfp4=...)")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"),
                    help="build directory (server/q38-server, worker/q38-worker, client/q38), or a folder of packed binaries")
    ap.add_argument("--tp", default="1,4", help="TP sizes, comma-separated")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="the ranks' device (cuda: GPUs 0..TP-1)")
    ap.add_argument("--n", type=int, default=100, help="held-out prompts per kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--out", default="out/eval")
    ap.add_argument("--jobs", type=int, default=1,
                    help="servers run side by side (one core per rank: TP1 and TP4 of two models want 10)")
    ap.add_argument("--startup_s", type=int, default=120)
    ap.add_argument("--request_timeout_s", type=float, default=300)
    args = ap.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(args.kinds) - set(KINDS):
        ap.error(f"unknown kinds {sorted(unknown)}")
    models = []
    for m in args.model:
        name, sep, path = m.partition("=")
        if not sep or not name or not os.path.isdir(path):
            ap.error(f"--model {m}: want NAME=DIR with an existing DIR")
        models.append((name, path))
    for folder, name in (("server", "q38-server"), ("worker", "q38-worker"), ("client", "q38")):
        if not os.access(tool(args.build, folder, name), os.X_OK):
            ap.error(f"{args.build}: no {folder}/{name} (or {name}): build it first")
    os.makedirs(args.out, exist_ok=True)

    from tokenizers import Tokenizer
    t0 = time.time()
    plan = []
    for name, path in models:
        # The checkpoint's own tokenizer: expected lengths, and a check of the server's tokenization.
        tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        sets = {k: [(e, tok.encode(e.prompt).ids, tok.encode(e.answer).ids) for e in held_out_prompts(k, args.n)]
                for k in args.kinds}
        plan += [(name, path, int(tp), sets) for tp in args.tp.split(",")]

    def one(job):
        name, path, tp, sets = job
        print(f"== {name} TP{tp}: {path}", flush=True)
        records, summary = run_one(args, name, path, tp, sets)
        lines = [f"== {name} TP{tp} done: startup {summary['startup_s']} s, requests {summary['requests_s']} s"]
        lines += [f"   {k}: answer {v['answer']:.3f} exact {v['exact']:.3f} EOS {v['natural_eos']:.3f} (n {v['n']})"
                  for k, v in summary["kinds"].items()]
        print("\n".join(lines), flush=True)
        return summary, records

    # Each rank computes on one thread, so independent servers side by side use more cores.
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    try:
        runs = list(pool.map(one, plan))
    except BaseException:
        ABORT.set()  # the other runs stop at their next request instead of finishing
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    report = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "n": args.n,
              "total_s": round(time.time() - t0, 1), "tp_agreement": tp_agreement(runs),
              "runs": [s for s, _ in runs], "records": {f"{s['model']}-tp{s['tp']}": r for s, r in runs}}
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
    with open(os.path.join(args.out, "eval.md"), "w") as f:
        f.write(markdown(report))
    print(f"wrote {args.out}/eval.json and {args.out}/eval.md in {report['total_s']} s")


if __name__ == "__main__":
    try:
        main()
    except EvalError as e:
        sys.exit(f"eval_server: {e}")
