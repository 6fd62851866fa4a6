#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/small_parity.jsonl: HF ids of the small model's tokenizer
(train/tokenizer/) on the general fixture corpus and on held-out curriculum text, in the format of
parity.jsonl (one variant, no patch), for tokenizer/tokenizer_test.

  pip install tokenizers jinja2
  python3 tests/tokenizer/make_small_fixture.py
"""

import itertools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "train"))
import corpus  # noqa: E402
import curriculum  # noqa: E402
import make_fixture  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def main():
    path = os.path.join(ROOT, "train", "tokenizer", "tokenizer.json")
    t = Tokenizer.from_file(path)
    with open(path) as f:
        split = json.load(f)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    texts = [s for cat, s in corpus.fixture_strings() if cat != "long"]
    texts += [e.prompt + e.answer for e in itertools.islice(curriculum.examples(0, "eval"), 300)]
    out = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "small_parity.jsonl")
    with open(out, "w") as f:
        meta = {"tokenizers_version": tokenizers.__version__, "split_pattern": split,
                "variants": [{"name": "small", "patch": []}]}
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for text in texts:
            ids = make_fixture.encode(t, text, True)
            rec = {"v": 0, "t": text, "ids": ids}
            nosp = make_fixture.encode(t, text, False)
            if nosp != ids:
                rec["ids_nosp"] = nosp
            dec = t.decode(ids, skip_special_tokens=False)
            if dec != text:
                rec["dec"] = dec
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {len(texts)} strings")


if __name__ == "__main__":
    main()
