#!/usr/bin/env python3
"""What one step of a kernel's main loop issues, from a binary's SASS: the kernel lab's count of a
GEMM tile's instructions a k-step, before any GPU time is spent on a variant.

  scripts/sass_loop.py BINARY NAME [--base OTHER_BINARY] [--any] [--list]

NAME is a regular expression searched in the mangled kernel names; each kernel that matches gets
a table. The loop is the longest backward branch whose body holds a tensor-core instruction
(HMMA: a k-step of a WMMA tile; --any takes the longest loop of any kind). The table counts its
instructions by opcode (predicate and modifiers dropped) beside the kernel's registers and stack
bytes; with --base, the same kernel of another build beside it. Every block of the loop counts,
a branch that seldom runs as well (a bounds-checked last step, say), so the loop's basic blocks
follow, each with its instructions and HMMA, LDG, STS: the path a step takes is a sum of some of
them. --list prints the loop's instructions.

cuobjdump and nvdisasm come from PATH or from .venv-cuda12 (scripts/setup-deps.sh puts them
there); --sass_text and --res_text read saved `cuobjdump -sass` and `-res-usage` output instead.
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tool(name):
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        os.path.join(ROOT, ".venv-cuda12/lib/python3*/site-packages/nvidia/cu*/bin", name)))), None)
    if not found:
        sys.exit(f"sass_loop: no {name} on PATH or in .venv-cuda12 (scripts/setup-deps.sh installs it)")
    return found


def cuobjdump(binary, flag):
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(tool("nvdisasm")))
    p = subprocess.run([tool("cuobjdump"), flag, binary], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"sass_loop: cuobjdump {flag} {binary}: {p.stderr.strip()}")
    return p.stdout


def functions(sass):
    """{mangled name: [(address, instruction text)]} from `cuobjdump -sass` output."""
    out = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name = part.split(None, 1)[0]
        out[name] = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", part)]
    return out


def resources(text):
    """{mangled name: 'REG:n STACK:n'} from `cuobjdump -res-usage` output."""
    out = {}
    for name, body in re.findall(r"Function (\S+?):?\n\s*(REG:\d+ STACK:\d+)", text):
        out[name] = body
    return out


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def branch_target(text):
    """The address a BRA jumps to, or None."""
    m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
    return int(m.group(1), 16) if m else None


def main_loop(instructions, any_loop):
    """The longest body [target, branch] of a backward branch (holding an HMMA unless any_loop)."""
    where = {a: i for i, (a, _) in enumerate(instructions)}
    best = []
    for i, (a, t) in enumerate(instructions):
        target = branch_target(t)
        if target is None or target >= a or target not in where:
            continue
        body = instructions[where[target]:i + 1]
        if (any_loop or any(opcode(x) == "HMMA" for _, x in body)) and len(body) > len(best):
            best = body
    return best


def blocks(loop):
    """[(first address, instructions)] of the loop's basic blocks: a block ends at a branch or
    where another branch of the loop lands."""
    targets = {branch_target(t) for _, t in loop} - {None}
    out = []
    for a, t in loop:
        if not out or a in targets or opcode(out[-1][1][-1]) == "BRA":
            out.append((a, []))
        out[-1][1].append(t)
    return out


def load(args_binary, sass_text, res_text):
    if sass_text:
        with open(sass_text) as f:
            sass = f.read()
        res = ""
        if res_text:
            with open(res_text) as f:
                res = f.read()
        return functions(sass), resources(res)
    return functions(cuobjdump(args_binary, "-sass")), resources(cuobjdump(args_binary, "-res-usage"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?")
    ap.add_argument("name")
    ap.add_argument("--base")
    ap.add_argument("--any", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--sass_text")
    ap.add_argument("--res_text")
    args = ap.parse_args()
    if not args.binary and not args.sass_text:
        ap.error("a binary or --sass_text")
    funcs, res = load(args.binary, args.sass_text, args.res_text)
    base_funcs, base_res = load(args.base, None, None) if args.base else ({}, {})
    names = [n for n in funcs if re.search(args.name, n)]
    if not names:
        sys.exit(f"sass_loop: no kernel matches {args.name}")
    for name in names:
        loop = main_loop(funcs[name], args.any)
        if not loop:
            print(f"{name}: no loop{'' if args.any else ' with an HMMA'}\n")
            continue
        counts = collections.Counter(opcode(t) for _, t in loop)
        base_loop = main_loop(base_funcs.get(name, []), args.any)
        base_counts = collections.Counter(opcode(t) for _, t in base_loop)
        print(f"{name}\n  {res.get(name, '')}" + (f"   base {base_res.get(name, '')}" if args.base else ""))
        print(f"  {'loop':<10}{len(loop):>6}" + (f"{len(base_loop):>8}" if args.base else ""))
        for op in sorted(set(counts) | set(base_counts), key=lambda o: (-counts[o], o)):
            print(f"  {op:<10}{counts[op]:>6}" + (f"{base_counts[op]:>8}" if args.base else ""))
        for a, body in blocks(loop):
            c = collections.Counter(opcode(t) for t in body)
            print(f"  block {a:#06x}: {len(body)} ({c['HMMA']} HMMA, {c['LDG']} LDG, {c['STS']} STS)")
        if args.list:
            for a, t in loop:
                print(f"  {a:#06x}  {t}")
        print()


if __name__ == "__main__":
    main()
