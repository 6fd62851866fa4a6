"""Checks that the monitoring files query what q38-server exports. Starts a real q38-server with a
CPU worker on a tiny generated checkpoint under the tiny-cpu contract (at one rank, with a short
benchmark), runs the contract benchmark through the real `q38` client (so that the contract and
benchmark series exist), scrapes /metrics, stops the server with SIGTERM (it must exit 0), then
requires:

- every metric the dashboard, the alert rules and the rule tests' recorded series name is one the
  scrape holds (histograms by their _bucket/_sum/_count series); `up` is Prometheus's own;
- every label they match on exists on that metric (job and instance are the scrape's), and every
  value an equality or a word|word regex matcher of a query asks for is one the server exports;
- every label a query groups or matches on (by, on, ...) is one of its metrics' labels;
- every q38_ family the server exports is on the dashboard.

usage: check_queried_metrics.py --server BIN --worker BIN --cli BIN --make_checkpoint BIN
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import promql_refs
from check_report import report

DEPLOY = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(DEPLOY, "grafana", "q38-server.json")
RULES = os.path.join(DEPLOY, "prometheus", "q38.rules.yml")
RULE_TESTS = os.path.join(DEPLOY, "prometheus", "q38.rules.test.yml")
CONTRACT = os.path.join(DEPLOY, "contracts", "tiny-cpu.json")
TARGET_LABELS = {"job", "instance"}  # what Prometheus attaches to every scraped series
PROMETHEUS_OWN = {"up"}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"')


def small_contract(work):
    """tiny-cpu at one rank with a short benchmark: the series are the same, the run is quick."""
    with open(CONTRACT) as f:
        contract = json.load(f)
    contract.update(name="tiny-cpu-tp1", tp=1)
    contract["benchmark"].update(prompt_lengths=[16], max_tokens=16)
    path = os.path.join(work, "contract.json")
    with open(path, "w") as f:
        json.dump(contract, f)
    return path, contract["max_context"]


def scrape_running_server(args, work):
    """The /metrics text of a server that has run a contract benchmark."""
    contract, max_context = small_contract(work)
    model = os.path.join(work, "model")
    subprocess.run([args.make_checkpoint, "--out=" + model, "--size=tiny", "--seed=1"], check=True,
                   stdout=subprocess.DEVNULL)
    ready = os.path.join(work, "ready.json")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen(
        [args.server, "--model=" + model, "--tp=1", "--max_context=%d" % max_context, "--contract=" + contract,
         "--worker_binary=" + args.worker, "--listen=127.0.0.1:0", "--metrics=127.0.0.1:0",
         "--run_dir=" + os.path.join(work, "run"), "--ready_file=" + ready, "--startup_timeout_s=120"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 150
        while not os.path.exists(ready):
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError("q38-server did not become ready (exit %s)" % server.poll())
            time.sleep(0.2)
        with open(ready) as f:
            ports = json.load(f)
        address = "--server=127.0.0.1:%d" % ports["grpc_port"]
        bench = subprocess.run([args.cli, "bench", address, "--contract=" + contract, "--repeats=2"],
                               capture_output=True, text=True, timeout=300)
        if bench.returncode != 0:
            raise RuntimeError("q38 bench exited %d: %s" % (bench.returncode, bench.stderr))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % ports["metrics_port"], timeout=10) as r:
            text = r.read().decode()
        server.send_signal(signal.SIGTERM)
        if server.wait(timeout=60) != 0:
            raise RuntimeError("q38-server exited %d on SIGTERM" % server.returncode)
        return text
    except BaseException:
        server.kill()
        server.wait()
        log.close()
        with open(log.name) as f:
            sys.stderr.write("---- server log ----\n" + f.read())
        raise


def exported(text):
    """({sample name: {label: set of values}}, {family name: type})."""
    samples, families = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            families[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            labels = samples.setdefault(m.group(1), {})
            for k, v in LABEL.findall(m.group(2) or ""):
                labels.setdefault(k, set()).add(v)
    return samples, families


def reference_problems(queries, samples, check_values):
    found = []
    for q in queries:
        labels_here = set(TARGET_LABELS)
        for name, matchers in q.selectors:
            if name in PROMETHEUS_OWN:
                known = {l: None for l in TARGET_LABELS}
            elif name not in samples:
                found.append("%s: %s is not exported" % (q.where, name))
                continue
            else:
                known = dict(samples[name], **{l: None for l in TARGET_LABELS})
            labels_here |= set(known)
            for label, op, value in matchers:
                if label not in known:
                    found.append("%s: %s has no label %s" % (q.where, name, label))
                elif check_values and known[label] is not None and "$" not in value:
                    wanted = value.split("|") if op == "=~" and re.fullmatch(r"[\w|]+", value) else \
                        [value] if op == "=" else []
                    for w in wanted:
                        if w not in known[label]:
                            found.append("%s: %s{%s} is never %r (exported: %s)"
                                         % (q.where, name, label, w, sorted(known[label])))
        for label in sorted(q.grouping - labels_here):
            found.append("%s: groups or matches on %s, which none of its metrics has" % (q.where, label))
    return found


def coverage_problems(dashboard_queries, families):
    shown = set().union(*(q.names() for q in dashboard_queries))
    found = []
    for family, kind in sorted(families.items()):
        names = {family + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {family}
        if family.startswith("q38_") and not names & shown:
            found.append("the dashboard shows nothing of %s (%s)" % (family, kind))
    return found


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--server", "--worker", "--cli", "--make_checkpoint"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        samples, families = exported(scrape_running_server(args, work))
    dashboard = promql_refs.dashboard_queries(DASHBOARD)
    rules = promql_refs.rules_queries(RULES)
    recorded = promql_refs.rule_test_series(RULE_TESTS)
    found = reference_problems(dashboard + rules, samples, check_values=True)
    found += reference_problems(recorded, samples, check_values=False)
    found += coverage_problems(dashboard, families)
    names = set().union(*(q.names() for q in dashboard + rules + recorded))
    return report(found, "the server exports %d families (%d series names); the dashboard, rules and "
                         "rule tests query %d names in %d expressions"
                  % (len(families), len(samples), len(names), len(dashboard + rules + recorded)))


if __name__ == "__main__":
    sys.exit(main())
