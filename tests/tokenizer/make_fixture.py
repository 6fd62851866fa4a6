#!/usr/bin/env python3
"""Writes the tokenizer parity fixtures from Hugging Face `tokenizers` and the real chat template.

  pip install tokenizers jinja2
  python3 tests/tokenizer/make_fixture.py                     # rewrites tests/fixtures/tokenizer/
  python3 tests/tokenizer/make_fixture.py --bench-corpus F    # also writes the benchmark corpus

Outputs (committed; tokenizer/tokenizer_test reads them):
  parity.jsonl        line 1: metadata and tokenizer variants (JSON patches applied to the Qwen3
                      tokenizer.json to exercise options Qwen3 does not use); then one line per
                      string: {"v": variant, "t": text, "ids": HF ids, "ids_nosp": ids with special
                      tokens not matched (when different), "dec": HF decode(ids) (when != t),
                      "nfc": NFC(t) (when != t), "pre": end offsets (code points) of the
                      pre-tokenizer pieces of NFC(t) (Qwen3, strings without added tokens)};
                      then {"decode": ids, "text", "text_skip"} lines.
  chat_template.json  conversations rendered by the real Jinja template, with their HF ids.
"""

import argparse
import copy
import datetime
import hashlib
import json
import os
import random
import sys
import unicodedata

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
import tokenizers
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZER_DIR = os.path.join(ROOT, "tests", "fixtures", "qwen3-tokenizer")
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

# Variants: JSON patches (RFC 6902, "add" operations only) on the Qwen3 tokenizer.json that
# exercise options Qwen3 itself does not use. The C++ test applies the same patch. Appended
# added tokens get the ids HF assigns (filled in below).
PRE_BYTELEVEL_PREFIX = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
PRE_SPLITS = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": "\n"}, "behavior": "MergedWithPrevious", "invert": False},
    # Single-character patterns, so that matches can be adjacent (the behaviours differ there).
    {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "MergedWithNext", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[.,;:!?]"}, "behavior": "Contiguous", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}]}
PRE_REMOVED_INVERT = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False},
    {"type": "Split", "pattern": {"Regex": "(?i:[aeiou])+"}, "behavior": "MergedWithNext", "invert": True},
    {"type": "Split", "pattern": {"String": "-"}, "behavior": "Removed", "invert": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False}]}


def _added(content, special, normalized, lstrip=False, rstrip=False, single_word=False):
    return {"op": "add", "path": "/added_tokens/-",
            "value": {"id": 0, "content": content, "single_word": single_word, "lstrip": lstrip,
                      "rstrip": rstrip, "normalized": normalized, "special": special}}


VARIANTS = [
    {"name": "qwen3", "patch": []},
    {"name": "added_token_flags", "patch": [
        {"op": "add", "path": "/pre_tokenizer", "value": PRE_BYTELEVEL_PREFIX},
        {"op": "add", "path": "/model/ignore_merges", "value": True},
        _added("<mask>", special=True, normalized=False, lstrip=True),
        _added("[R]", special=False, normalized=False, rstrip=True),
        _added("word", special=False, normalized=True, single_word=True),
        _added("caf\u00e9", special=False, normalized=True, rstrip=True),
        _added("<both>", special=True, normalized=False, lstrip=True, rstrip=True, single_word=True),
        _added("\u00c5ngstr\u00f6m", special=True, normalized=True),
    ]},
    {"name": "split_behaviors", "patch": [{"op": "add", "path": "/pre_tokenizer", "value": PRE_SPLITS}]},
    {"name": "split_removed_invert_no_nfc", "patch": [
        {"op": "add", "path": "/normalizer", "value": None},
        {"op": "add", "path": "/pre_tokenizer", "value": PRE_REMOVED_INVERT}]},
]

VARIANT_TEXTS = [
    "a  <mask> b", "<mask>", "  <mask>  ", "x<mask>y", "[R]   z", "[R]", "a [R]\n\nb", "words word sword word.",
    "word", "word_x", "(word)", "cafe\u0301  x", "caf\u00e9\u3000y", "un caf\u00e9", "A<both> b", "a <both> b",
    "a\t<both>\tb", "<both><both>", "\u212bngstr\u00f6m", "A\u030angstro\u0308m!", "12 apples, 3.5 pears;; ok!!",
    "line1\nline2\n\nline3\n", "v1.2.3-rc4", "re-entry co-op --- x", "AEIOU aeiou xyz", "queue",
    "12345abc", "a1b22c333", "aib", "queueing", "naïve", "ooh", "eel", "x9", "wait...what?!", "a,b;;c:::d", "\n\n\nx\n\n", "2024-01-01T00:00",
]


def apply_patch(base, patch):
    """Applies RFC 6902 "add" operations; "/-" appends to an array."""
    d = copy.deepcopy(base)
    for op in patch:
        assert op["op"] == "add", op
        *parents, last = op["path"].split("/")[1:]
        target = d
        for key in parents:
            target = target[key]
        if last == "-":
            target.append(copy.deepcopy(op["value"]))
        else:
            target[last] = copy.deepcopy(op["value"])
    return d


def fix_added_ids(patch, base):
    """Returns `patch` with the ids HF assigns to the added tokens it appends."""
    patch = copy.deepcopy(patch)
    t = Tokenizer.from_str(json.dumps(apply_patch(base, patch)))
    for op in patch:
        if op["path"] == "/added_tokens/-":
            op["value"]["id"] = t.token_to_id(op["value"]["content"])
    return patch


def hf_tokenizer(d):
    return Tokenizer.from_str(json.dumps(d))


def encode(t, text, special):
    t.encode_special_tokens = not special
    try:
        return t.encode(text, add_special_tokens=False).ids
    finally:
        t.encode_special_tokens = False


def parity(base):
    lines = []
    strings = corpus.fixture_strings()
    variant_patches = []
    for vi, variant in enumerate(VARIANTS):
        patch = fix_added_ids(variant["patch"], base)
        d = apply_patch(base, patch)
        variant_patches.append({"name": variant["name"], "patch": patch})
        t = hf_tokenizer(d)
        if vi == 0:
            texts = [s for _, s in strings]
        else:  # a sample of the corpus plus strings aimed at the variant's options
            texts = VARIANT_TEXTS + [s for i, (cat, s) in enumerate(strings) if i % 9 == vi and cat != "long"]
        for text in texts:
            ids = encode(t, text, True)
            rec = {"v": vi, "t": text, "ids": ids}
            nosp = encode(t, text, False)
            if nosp != ids:
                rec["ids_nosp"] = nosp
            dec = t.decode(ids, skip_special_tokens=False)
            if dec != text:
                rec["dec"] = dec
            if vi == 0:
                n = unicodedata.normalize("NFC", text)
                if n != text:
                    rec["nfc"] = n
                has_added = any(tok.content in text for tok in t.get_added_tokens_decoder().values())
                if not has_added:
                    assert dec == n, (text, dec, n)  # decode(encode(s)) == NFC(s)
                    if len(text) <= 4000:
                        # Pre-tokenizer pieces (code point end offsets in NFC(s)): a regex
                        # difference can change pieces without changing ids.
                        rec["pre"] = [e for _, (_, e) in t.pre_tokenizer.pre_tokenize_str(n)]
            lines.append(rec)

    # Decoding arbitrary id sequences: partial UTF-8 characters, special tokens, added tokens.
    t = hf_tokenizer(base)
    rng = random.Random(7)
    size = t.get_vocab_size(with_added_tokens=True)
    byte_tokens = [i for i in range(size) if 0x80 <= ord(t.id_to_token(i)[0]) < 0x180 and len(t.id_to_token(i)) == 1]
    for k in range(300):
        n = rng.randint(1, 24)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.35:
                ids.append(byte_tokens[rng.randrange(len(byte_tokens))])
            elif r < 0.45:
                ids.append(rng.randrange(151643, size))
            else:
                ids.append(rng.randrange(0, 151643))
        lines.append({"decode": ids, "text": t.decode(ids, skip_special_tokens=False),
                      "text_skip": t.decode(ids, skip_special_tokens=True)})
    return variant_patches, lines


# --- chat template -----------------------------------------------------------------------

def render_like_transformers(template, messages, add_generation_prompt, extra, special_tokens):
    """Renders the way transformers' apply_chat_template does (tokenize=False)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    kwargs = dict(special_tokens)
    kwargs.update(extra)
    return env.from_string(template).render(messages=messages, tools=None, documents=None,
                                            add_generation_prompt=add_generation_prompt, **kwargs)


def S(content):
    return {"role": "system", "content": content}


def U(content):
    return {"role": "user", "content": content}


def A(content, reasoning=None, has_reasoning=False):
    m = {"role": "assistant", "content": content}
    if has_reasoning or reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def T(content):
    return {"role": "tool", "content": content}


def chat_cases():
    think = "<think>\nLet me think about it.\n</think>\n\nThe answer is 4."
    return [
        [U("Hello!")],
        [S("You are a helpful assistant."), U("What is 2+2?")],
        [S("Be terse."), U("hi"), A("Hello."), U("How are you?")],
        [U("q1"), A(think), U("q2")],
        [U("q1"), A(think)],
        [U("q1"), A("plain answer")],
        [U("q1"), A("answer", reasoning="step 1\nstep 2")],
        [U("q1"), A("answer", reasoning="")],
        [U("q1"), A("answer", reasoning=None, has_reasoning=True)],
        [U("q1"), A("\n\n<think>\n\nspaced\n\n</think>\n\n\nanswer\n")],
        [U("q1"), A("a<think>x</think>b</think>c")],
        [U("q1"), A("no open tag</think>rest")],
        [U("q"), A("", reasoning="r"), T("{\"temp\": 20}"), A("It is 20 degrees.")],
        [U("weather?"), A("calling"), T("r1"), T("r2"), A(think)],
        [U("first"), A(think), U("<tool_response>\nok\n</tool_response>"), A("done")],
        [U("<tool_response>x</tool_response>"), A(think)],
        [S("sys"), U("u1"), S("mid-system"), U("u2")],
        [S("only system")],
        [A("assistant first"), U("then user")],
        [U(""), A("")],
        [U("Ünïcödé 中文 🎉 <|im_end|> inside"), A("ok <think>keep?</think> tail")],
        [U("multi\nline\n\ncontent  "), A("  spaces  ")],
        [S("s"), U("a"), A("b", reasoning="rb"), U("c"), A("d", reasoning="rd"), U("e")],
        [U("x"), A("y", reasoning="ry"), A("z")],
        [U("x"), A(think), A(think)],
        [U("x"), A("\n\nanswer after newlines", reasoning="\nr\n")],
        [U("x"), A("\nmid", reasoning="r"), U("y"), A("\n\nlast", reasoning="")],
    ]


def chat_fixture(config, base):
    template = config["chat_template"]
    special = {k: v for k, v in config.items() if k.endswith("_token") and (v is None or isinstance(v, str))}
    special["additional_special_tokens"] = config.get("additional_special_tokens", [])
    t = hf_tokenizer(base)
    cases = []
    for messages in chat_cases():
        for agp in (True, False):
            for thinking in (None, True, False):
                extra = {} if thinking is None else {"enable_thinking": thinking}
                text = render_like_transformers(template, messages, agp, extra, special)
                case = {"messages": messages, "add_generation_prompt": agp, "text": text,
                        "ids": t.encode(text, add_special_tokens=False).ids}
                if thinking is not None:
                    case["enable_thinking"] = thinking
                cases.append(case)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--bench-corpus", help="also write the benchmark corpus (JSON lines of documents) here")
    ap.add_argument("--bench-mb", type=float, default=4.0)
    args = ap.parse_args()

    with open(os.path.join(TOKENIZER_DIR, "tokenizer.json"), "rb") as f:
        raw = f.read()
    base = json.loads(raw)
    with open(os.path.join(TOKENIZER_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)

    os.makedirs(args.out, exist_ok=True)
    variants, lines = parity(base)
    meta = {"tokenizers_version": tokenizers.__version__, "jinja2_version": jinja2.__version__,
            "tokenizer_json_sha256": hashlib.sha256(raw).hexdigest(), "variants": variants,
            "split_pattern": base["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]}
    path = os.path.join(args.out, "parity.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False, separators=(",", ":")) + "\n")
        for rec in lines:
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
    n_strings = sum(1 for r in lines if "t" in r)
    print(f"{path}: {n_strings} strings, {len(lines) - n_strings} decode cases, {os.path.getsize(path)} bytes")

    cases = chat_fixture(config, base)
    path = os.path.join(args.out, "chat_template.json")
    with open(path, "w", encoding="utf-8") as f:
        # One JSON document, one case per line.
        f.write('{"jinja2_version": %s, "cases": [\n' % json.dumps(jinja2.__version__))
        f.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"{path}: {len(cases)} cases")

    if args.bench_corpus:
        docs = corpus.bench_documents(int(args.bench_mb * 1e6))
        with open(args.bench_corpus, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        print(f"{args.bench_corpus}: {len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes")


if __name__ == "__main__":
    main()
