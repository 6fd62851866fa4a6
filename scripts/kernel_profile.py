#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (`ncu --csv --page raw --print-units base --metrics
gpu__time_duration.sum[,dram__bytes.sum]`) per kernel and per model step: the kernels from the
first step marker on (the weight fill before it is left out), divided by the number of markers, so
each row is one step's share. Where the CSV has dram__bytes.sum, each row also gets the DRAM
bandwidth its kernel reached (bytes read and written over its time), to hold against the GPU's.

  scripts/kernel_profile.py PROFILE.csv --step_marker EmbedStreams [--top 25] [--period N --pick I]
                            [--split KERNEL]

With --period N, the steps are taken in runs of N and only the I-th of each run is kept: a
prefill followed by a decode step, profiled twice, is --period 2 --pick 0 for the prefills.
With --split, the kernels whose name contains KERNEL get a row per grid size (per shape).
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
        t = r.get("gpu__time_duration.sum", "").replace(",", "")
        b = r.get("dram__bytes.sum", "").replace(",", "")
        if r.get("Kernel Name") and re.fullmatch(r"[0-9.]+", t):
            # ns and bytes with --print-units base; no bytes where the profile did not ask
            yield r["Kernel Name"], r.get("Grid Size", ""), float(t), float(b) if re.fullmatch(r"[0-9.]+", b) else None


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
    ap.add_argument("--split", help="a kernel to show per grid size")
    args = ap.parse_args()
    if not 0 <= args.pick < args.period:
        sys.exit("--pick must be in [0, --period)")
    kernels = []
    for name, grid, t, b in rows(args.csv):
        n = short(name)
        kernels.append((f"{n} {grid}" if args.split and args.split in n else n, t, b))
    first = next((i for i, k in enumerate(kernels) if args.step_marker in k[0]), None)
    if first is None:
        sys.exit(f"no {args.step_marker} kernel among {len(kernels)}")
    kept, step = [], -1
    for k in kernels[first:]:
        step += args.step_marker in k[0]
        if step % args.period == args.pick:
            kept.append(k)
    kernels = kept
    steps = sum(args.step_marker in k[0] for k in kernels)
    if steps == 0:
        sys.exit(f"no step {args.pick} of a run of {args.period}")
    has_bytes = all(b is not None for _, _, b in kernels)
    time, count, traffic = collections.Counter(), collections.Counter(), collections.Counter()
    for n, t, b in kernels:
        time[n] += t
        count[n] += 1
        traffic[n] += b or 0
    total = sum(time.values())
    print(f"{steps} steps, {len(kernels) / steps:.0f} kernels and {total / steps / 1e6:.2f} ms of kernel time per step")
    if has_bytes:
        moved = sum(traffic.values())
        print(f"DRAM traffic {moved / steps / 1e6:.1f} MB per step, {moved / total:.0f} GB/s over the kernel time")
    print(f"{'kernel':<40} {'per step':>9} {'µs/step':>10} {'share':>7}" + (f" {'GB/s':>7}" if has_bytes else ""))
    for n, t in time.most_common(args.top):
        line = f"{n:<40} {count[n] / steps:>9.1f} {t / steps / 1e3:>10.1f} {100 * t / total:>6.1f}%"
        print(line + (f" {traffic[n] / t:>7.0f}" if has_bytes else ""))


if __name__ == "__main__":
    main()
