#!/usr/bin/env python3
"""Checks that every reference in the repository's docs and code points at something that exists.

- Markdown links `[text](target)` in tracked .md files: the target file (relative to the page,
  anchors and web links aside) must exist.
- Paths of repository sources named in .md pages and in code comments (`docs/contract.md`,
  `kernels/backend.h`, `scripts/gpu-run.sh`, ...; a name with a source extension): the file must
  exist. Names with wildcards or placeholders (`<op>`, `*`, `YYYY`) are patterns and are skipped;
  build outputs and string literals in code are not references.
- Section references `FILE.md §N.M`: FILE.md must have a heading numbered N.M (`## 8.` or
  `### 8.2 ...`), or item M of a numbered list under heading N; a bare `§N.M` refers to the page
  named last on its line, else (in a .md page) to the page itself.
- Nothing may point outside the repository at the shared docs it grew from.

Prints one line per broken reference and exits 1 if there is any. Usage: scripts/check_docs.py [ROOT]
"""
import os
import re
import subprocess
import sys

TOP = ("docs", "kernels", "worker", "server", "client", "tests", "scripts", "deploy", "provenance",
       "tokenizer", "common", "proto", "train", "models", ".ci")
TEXT = (".md", ".cc", ".h", ".cu", ".cuh", ".sh", ".py", ".txt", ".proto", ".json", ".yaml", ".yml", ".service")
SOURCE = r"\.(?:md|h|cc|cu|cuh|sh|py|json|proto|txt|yaml|yml)"
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./+-]*%s)(?![\w{])" % ("|".join(re.escape(t) for t in TOP), SOURCE))
COMMENT = re.compile(r"(?://|^\s*#(?!include)|^\s*\*|\"\"\"|^\s*<!--)(.*)$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SECTION = re.compile(r"(?:(?<![\w/.-])([\w./-]+\.md)\s+)?§\s?(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#+\s+§?(\d+(?:\.\d+)*)[.\s]")
ITEM = re.compile(r"^(\d+)\.\s")
OUTSIDE = re.compile(r"\.\./shared/|\b(?:MODEL|BASELINE_CONTRACT|PERFORMANCE|SERVER_FEATURES|STYLE|DESIGN)\.md\b")
PATTERN = re.compile(r"[<>*{}$]|YYYY|XXXX")


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f.endswith(TEXT) or os.path.basename(f) in ("CMakeLists.txt", "run")]


def headings(root, page, cache={}):
    """The section numbers of a page: its numbered headings, and N.M for item M of a numbered list
    under heading N."""
    key = (root, page)
    if key not in cache:
        numbers, current = set(), None
        with open(os.path.join(root, page), encoding="utf-8") as f:
            for line in f:
                m = HEADING.match(line)
                if m:
                    current = m.group(1)
                    numbers.add(current)
                    continue
                item = ITEM.match(line)
                if item and current:
                    numbers.add(f"{current}.{item.group(1)}")
        cache[key] = numbers
    return cache[key]


def check(root):
    problems = []
    for rel in tracked(root):
        if rel.startswith("scripts/check_docs"):  # the checker and its test name broken references on purpose
            continue
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        is_md = rel.endswith(".md")
        for n, line in enumerate(lines, 1):
            where = f"{rel}:{n}"
            if OUTSIDE.search(line):
                problems.append(f"{where}: points outside the repository: {OUTSIDE.search(line).group(0)}")
            if is_md:
                for target in LINK.findall(line):
                    if re.match(r"[a-z]+:", target) or target.startswith("#"):
                        continue
                    file = target.split("#")[0]
                    if file and not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), file))):
                        problems.append(f"{where}: link to a missing file: {target}")
            prose = line if is_md else (COMMENT.search(line).group(1) if COMMENT.search(line) else "")
            for ref in PATH.findall(prose):
                ref = ref.rstrip(".")
                if PATTERN.search(ref):
                    continue
                if not os.path.exists(os.path.join(root, ref)):
                    problems.append(f"{where}: names a missing path: {ref}")
            last_page = None
            for page, number in SECTION.findall(line):
                if page:
                    last_page = page
                elif last_page:
                    page = last_page
                elif is_md:
                    page = rel
                else:
                    continue
                if not os.path.exists(os.path.join(root, page)):
                    candidate = os.path.normpath(os.path.join(os.path.dirname(rel), page))
                    if os.path.exists(os.path.join(root, candidate)):
                        page = candidate
                    elif os.path.exists(os.path.join(root, "docs", page)):
                        page = os.path.join("docs", page)
                    else:
                        problems.append(f"{where}: § reference to a missing page: {page} §{number}")
                        continue
                if number not in headings(root, page):
                    problems.append(f"{where}: {page} has no section §{number}")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check(os.path.abspath(root))
    for p in problems:
        print(p)
    print(f"check_docs: {len(problems)} broken reference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
