#!/usr/bin/env python3
"""Trains the small model's tokenizer on the curriculum: byte-level BPE of the Qwen family.

  python3 train/make_tokenizer.py [--vocab 4000] [--out train/tokenizer]

Same normalizer (NFC), pre-tokenizer (Qwen's Split regex, then ByteLevel), decoder and added
tokens (Qwen3's 26, same order, same flags, placed after the BPE vocabulary) as the Qwen3
tokenizer in tests/fixtures/qwen3-tokenizer/, whose tokenizer_config.json (chat template
included) is reused with only the added-token ids changed. Deterministic: same corpus, same file.
"""

import argparse
import copy
import itertools
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import curriculum

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
QWEN3 = os.path.join(ROOT, "tests", "fixtures", "qwen3-tokenizer")


def corpus(n):
    """Prompts and answers of the training stream, and eval-split text, so held-out prompts
    tokenize like training ones."""
    for split, count in (("train", n), ("eval", n // 8)):
        for e in itertools.islice(curriculum.examples(0, split), count):
            yield e.prompt + e.answer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=4000, help="BPE vocabulary size, added tokens not counted")
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--out", default=os.path.join(ROOT, "train", "tokenizer"))
    args = ap.parse_args()
    with open(os.path.join(QWEN3, "tokenizer.json")) as f:
        qwen = json.load(f)
    with open(os.path.join(QWEN3, "tokenizer_config.json")) as f:
        qwen_config = json.load(f)
    added = qwen["added_tokens"]
    split = qwen["pre_tokenizer"]["pretokenizers"][0]

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split["pattern"]["Regex"]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    # Special-token strings stay out of the merges: they are cut out before BPE at run time.
    specials = [a["content"] for a in added]
    stripped = []
    for s in corpus(args.examples):
        for sp in specials:
            s = s.replace(sp, "\n")
        stripped.append(s)
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(stripped, trainer)

    data = json.loads(tok.to_str())
    base = tok.get_vocab_size()
    data["added_tokens"] = []
    for i, a in enumerate(added):
        entry = copy.deepcopy(a)
        entry["id"] = base + i
        data["added_tokens"].append(entry)
    data["post_processor"] = copy.deepcopy(qwen["post_processor"])
    data["pre_tokenizer"] = copy.deepcopy(qwen["pre_tokenizer"])
    data["normalizer"] = copy.deepcopy(qwen["normalizer"])
    data["decoder"] = copy.deepcopy(qwen["decoder"])
    for key in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                "byte_fallback", "ignore_merges"):
        data["model"][key] = qwen["model"][key]
    config = copy.deepcopy(qwen_config)
    config["added_tokens_decoder"] = {str(base + i): {k: v for k, v in a.items() if k != "id"}
                                      for i, a in enumerate(added)}
    config["model_max_length"] = 4096

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    check = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    ids = check.encode("<|im_start|>user\n19 × 23<|im_end|>").ids
    print(f"{args.out}: {base} BPE tokens + {len(added)} added (ids {base}..{base + len(added) - 1}); "
          f"<|endoftext|>={base}, <|im_end|>={base + 2}; sample ids {ids}")


if __name__ == "__main__":
    main()
