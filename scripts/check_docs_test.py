#!/usr/bin/env python3
"""scripts/check_docs.py on a small git tree with one reference of each kind, right and broken:
links, paths named in pages and in code comments, § references to headings and to list items, and
a pointer outside the repository; then on the repository itself, which must have none broken."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_docs  # noqa: E402

PAGES = {
    "docs/model.md": "# Model\n\n## 3. Forward\n\n### 3.1 Layers\n\n## 16. Room\n\n1. one\n2. two\n",
    "docs/a.md": ("See [the model](model.md), docs/model.md §3.1 and §16.2, and docs/model.md §3 / §16.1.\n"
                  "Kernels in `kernels/x.h`; a pattern `kernels/<op>/<op>_test.cc` is no path.\n"),
    "kernels/x.h": '// The math: docs/model.md §3.\nconst char* kName = "docs/none.md";  // a string, not a reference\n',
}
BROKEN = {
    "docs/b.md": ("[gone](gone.md); docs/missing.md; docs/model.md §4; docs/model.md §16.3\n"
                  "and §9 of this page\n"
                  "MODEL" ".md §1 of a tree outside\n"),  # split so this file names no outside doc
    "kernels/y.cc": "// see docs/model.md §2 and kernels/nothere.cc\n",
}


def tree(files):
    root = tempfile.mkdtemp()
    for rel, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
            f.write(text)
    subprocess.run(["git", "init", "-q", root], check=True)
    subprocess.run(["git", "-C", root, "add", "."], check=True)
    return root


class CheckDocs(unittest.TestCase):
    def test_right_references_pass(self):
        self.assertEqual(check_docs.check(tree(PAGES)), [])

    def test_each_broken_reference_is_named(self):
        problems = check_docs.check(tree({**PAGES, **BROKEN}))
        text = "\n".join(problems)
        for expected in ["docs/b.md:1: link to a missing file: gone.md",
                         "docs/b.md:1: names a missing path: docs/missing.md",
                         "docs/b.md:1: docs/model.md has no section §4",
                         "docs/b.md:1: docs/model.md has no section §16.3",
                         "docs/b.md:2: docs/b.md has no section §9",
                         "docs/b.md:3: points outside the repository: " "MODEL" ".md",
                         "docs/b.md:3: § reference to a missing page: " "MODEL" ".md §1",
                         "kernels/y.cc:1: docs/model.md has no section §2",
                         "kernels/y.cc:1: names a missing path: kernels/nothere.cc"]:
            self.assertIn(expected, text)
        self.assertEqual(len(problems), 9, text)

    def test_the_repository_has_no_broken_reference(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        self.assertEqual(check_docs.check(os.path.abspath(root)), [])


if __name__ == "__main__":
    unittest.main()
