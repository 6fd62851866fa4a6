#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (`ncu --csv --page raw --metrics gpu__time_duration.sum`) per
kernel and per model step: the kernels from the first step marker on (the weight fill before it
is left out), divided by the number of markers, so each row is one step's share.

  scripts/kernel_profile.py PROFILE.csv --step_marker EmbedStreams [--top 25] [--period N --pick I]
                            [--by_grid GemvKernel]

With --period N, the steps are taken in runs of N and only the I-th of each run is kept: a
prefill followed by a decode step, profiled twice, is --period 2 --pick 0 for the prefills.
With --by_grid K, kernels whose name holds K get a row per grid size ("GemvKernel<1>[1280,1,1]"):
one kernel serving many shapes (the GEMV) shows which of them the time goes to.
"""

import argparse
import collections
import csv
import re
import sys


def rows(path):
    with open(path, newline="", errors="replace") as f:
        lines = f.readlines()
    start = next((i for i, l in enumerate(lines) if '"Kernel Name"' in l), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header")
    reader = csv.DictReader(lines[start:])
    for r in reader:
        t = r.get("gpu__time_duration.sum", "")
        if r.get("Kernel Name") and re.fullmatch(r"[0-9.]+", t.replace(",", "")):
            yield r["Kernel Name"], (r.get("Grid Size") or "").strip("()").replace(" ", ""), float(t.replace(",", ""))  # ns


def short(name):
    """The kernel's name with its template arguments, without namespaces, return type or parameters."""
    for anonymous in ("(anonymous namespace)::", "unnamed>::"):  # ncu: `unnamed>::`
        name = name.replace(anonymous, "")
    name = re.sub(r"^void\s+", "", name.split("(")[0])
    return re.sub(r"\b\w+::", "", name).strip() or name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step_marker", required=True, help="a kernel that runs once at the start of every step")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--period", type=int, default=1, help="steps per run")
    ap.add_argument("--pick", type=int, default=0, help="the step of each run to keep, 0-based")
    ap.add_argument("--by_grid", default="", help="a row per grid size for kernels whose name holds this")
    args = ap.parse_args()
    if not 0 <= args.pick < args.period:
        sys.exit("--pick must be in [0, --period)")
    kernels = [(f"{short(n)}[{g}]" if args.by_grid and args.by_grid in n and g else short(n), t)
               for n, g, t in rows(args.csv)]
    first = next((i for i, (n, _) in enumerate(kernels) if args.step_marker in n), None)
    if first is None:
        sys.exit(f"no {args.step_marker} kernel among {len(kernels)}")
    kept, step = [], -1
    for n, t in kernels[first:]:
        step += args.step_marker in n
        if step % args.period == args.pick:
            kept.append((n, t))
    kernels = kept
    steps = sum(args.step_marker in n for n, _ in kernels)
    if steps == 0:
        sys.exit(f"no step {args.pick} of a run of {args.period}")
    time, count = collections.Counter(), collections.Counter()
    for n, t in kernels:
        time[n] += t
        count[n] += 1
    total = sum(time.values())
    print(f"{steps} steps, {len(kernels) / steps:.0f} kernels and {total / steps / 1e6:.2f} ms of kernel time per step")
    print(f"{'kernel':<40} {'per step':>9} {'µs/step':>10} {'share':>7}")
    for n, t in time.most_common(args.top):
        print(f"{n:<40} {count[n] / steps:>9.1f} {t / steps / 1e3:>10.1f} {100 * t / total:>6.1f}%")


if __name__ == "__main__":
    main()
