"""Checks deploy/grafana/q38-server.json: a dashboard Grafana imports (uid, title, schema version,
the Prometheus data source as a variable every panel and target uses, unique panel ids, panels
inside the 24-column grid without overlaps, targets with unique refIds and an expression), and
every PromQL expression in it valid by `promtool check rules` (each becomes a recording rule, with
Grafana's interval variables replaced by a duration). Whether the metrics exist is
check_queried_metrics.py's part.

usage: check_dashboard.py --promtool PATH
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import promql_refs  # noqa: E402
from check_report import report  # noqa: E402

DASHBOARD = os.path.join(HERE, "q38-server.json")
DATASOURCE = "${datasource}"


def all_panels(items):
    for p in items:
        yield p
        yield from all_panels(p.get("panels", []))


def problems(d):
    found = []
    for key, kind in (("uid", str), ("title", str), ("schemaVersion", int), ("panels", list)):
        if not isinstance(d.get(key), kind) or not d[key]:
            found.append("no %s" % key)
    variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        found.append("no Prometheus data source variable named datasource")

    ids, cells = set(), {}
    for p in all_panels(d.get("panels", [])):
        title = p.get("title")
        if not isinstance(p.get("id"), int) or p["id"] in ids:
            found.append("panel %r: id missing or repeated" % title)
        ids.add(p.get("id"))
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "xywh") or g["x"] < 0 or g["w"] < 1 \
                or g["x"] + g["w"] > 24 or g["h"] < 1:
            found.append("panel %r: gridPos %s is outside the 24-column grid" % (title, g))
            continue
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    found.append("panel %r overlaps panel %r" % (title, cells[(x, y)]))
                    break
                cells[(x, y)] = title
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        if p.get("datasource", {}).get("uid") != DATASOURCE or not targets:
            found.append("panel %r: no targets, or not on the datasource variable" % title)
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            found.append("panel %r: refIds missing or repeated" % title)
        for t in targets:
            if t.get("datasource", {}).get("uid") != DATASOURCE or not t.get("expr", "").strip():
                found.append("panel %r target %s: no expression, or not on the datasource variable"
                             % (title, t.get("refId")))
    return found


def promtool_problems(promtool, queries):
    """Every expression as a recording rule, through `promtool check rules`."""
    rules = [{"record": "q38_dashboard:check_%d" % i,
              "expr": promql_refs.GRAFANA_INTERVALS.sub("5m", q.expr)} for i, q in enumerate(queries)]
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        f.flush()
        run = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    if run.returncode == 0:
        return []
    return ["promtool check rules: " + (run.stdout + run.stderr).strip() + "\n(rule i is query i: "
            + "; ".join("%d %s" % (i, q.where) for i, q in enumerate(queries)) + ")"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--promtool", required=True)
    args = parser.parse_args()
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    found = problems(dashboard)
    queries = promql_refs.dashboard_queries(DASHBOARD)
    found += promtool_problems(args.promtool, queries)
    return report(found, "%d queries in %d panels" % (len(queries), len(list(all_panels(dashboard["panels"])))))


if __name__ == "__main__":
    sys.exit(main())
