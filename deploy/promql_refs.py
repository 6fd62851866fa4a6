"""The series the deploy/ monitoring files query: every PromQL expression of the Grafana dashboard
(panel targets and template variables) and of the Prometheus rules, and every series the rule
tests record, each broken into the metric names it selects, their label matchers and the labels
it groups or matches on.

A small PromQL reader, not a parser: it tokenizes, skips strings, ranges and numbers, and takes an
identifier for a metric name unless it calls a function, is an aggregation, a keyword or a label
list. What it cannot tokenize is an error rather than a guess.
"""

import json
import re

import yaml

TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:\d+(?:ms|[smhdwy]))+|0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=,(){}@])
""", re.X)

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
# Grafana's interval variables, as a duration PromQL reads.
GRAFANA_INTERVALS = re.compile(r"\$(?:__rate_interval|__interval|__range)\b|\$\{(?:__rate_interval|__interval|__range)\}")


class Query:
    """One expression: `selectors` as (metric name or None, [(label, op, value)]), `grouping` the
    labels of its by/without/on/ignoring/group_* lists."""

    def __init__(self, where, expr):
        self.where, self.expr = where, expr
        self.selectors, self.grouping = [], set()
        self._read(GRAFANA_INTERVALS.sub("5m", expr))

    def names(self):
        return {name for name, _ in self.selectors if name}

    def _read(self, text):
        tokens, at = [], 0
        while at < len(text):
            m = TOKEN.match(text, at)
            if not m:
                raise ValueError("%s: cannot read %r in %r" % (self.where, text[at:at + 20], self.expr))
            at = m.end()
            if m.lastgroup != "space":
                tokens.append((m.lastgroup, m.group()))
        i = 0
        while i < len(tokens):
            kind, value = tokens[i]
            following = tokens[i + 1][1] if i + 1 < len(tokens) else None
            if kind == "ident" and value in LABEL_LISTS and following == "(":
                i += 2
                while tokens[i][1] != ")":
                    if tokens[i][0] == "ident":
                        self.grouping.add(tokens[i][1])
                    i += 1
            elif kind == "ident" and (following == "(" or value in AGGREGATIONS
                                      or value.lower() in KEYWORDS):
                pass
            elif kind == "ident":
                matchers = []
                if following == "{":
                    i = self._matchers(tokens, i + 2, matchers)
                self.selectors.append((value, matchers))
            elif value == "{":
                matchers = []
                i = self._matchers(tokens, i + 1, matchers)
                name = next((v for l, op, v in matchers if l == "__name__" and op == "="), None)
                self.selectors.append((name, matchers))
            i += 1

    def _matchers(self, tokens, i, out):
        """Reads `label op "value"`, ... up to the closing brace; returns its index."""
        while tokens[i][1] != "}":
            if tokens[i][1] == ",":
                i += 1
                continue
            (k1, label), (k2, op), (k3, quoted) = tokens[i:i + 3]
            if k1 != "ident" or k2 != "op" or k3 != "string":
                raise ValueError("%s: not a label matcher at %r in %r" % (self.where, label, self.expr))
            out.append((label, op, quoted[1:-1]))
            i += 3
        return i


def dashboard_queries(path):
    """Every query of a Grafana dashboard: panel targets (rows' nested panels too) and the
    `label_values(SELECTOR, label)` / `query_result(EXPR)` of its query variables."""
    with open(path) as f:
        dashboard = json.load(f)
    out = []

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            out.append(Query("panel %r target %s" % (p.get("title"), t.get("refId")), t["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*(?:label_values\((.*),\s*\w+\s*\)|query_result\((.*)\))\s*", q, re.S)
        if not m:
            raise ValueError("variable %r: unreadable query %r" % (v.get("name"), q))
        out.append(Query("variable %r" % v.get("name"), m.group(1) or m.group(2)))
    return out


def rules_queries(path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    return [Query("rule %s" % (r.get("alert") or r.get("record")), r["expr"])
            for g in doc["groups"] for r in g["rules"]]


def rule_test_series(path):
    """The series a `promtool test rules` file records, as selectors."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    return [Query("test %r series" % t.get("name"), s["series"])
            for t in doc["tests"] for s in t.get("input_series", [])]
