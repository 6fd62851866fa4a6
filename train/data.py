"""Training rows: curriculum examples tokenized and packed into fixed-length rows.

Examples are separated by <|endoftext|> (which also resets the PLE n-grams, as at the start of a
sequence). Labels are -100 except on what the model must produce: the answer of a chat example
(its think block, the reply and <|im_end|>) and the whole of a plain prose example. Row i depends
only on (seed, i), so a resumed run continues the same stream.
"""

import collections
import itertools
import multiprocessing as mp
import os
import re
import string

import numpy as np

import curriculum

TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer", "tokenizer.json")
ROWS_PER_CHUNK = 64
_tok = None


def code_words(tok):
    """For every letter token, the first of its word, A–Z + it, or two letters + it whose tokens
    after a space include it (every one of the 3,047 has one)."""
    words = []
    for token, i in sorted(tok.get_vocab().items()):
        if not re.fullmatch("Ġ?[A-Z]+", token):
            continue
        run = token.removeprefix("Ġ")
        tries = [run] if token.startswith("Ġ") else [p + run for p in string.ascii_uppercase] + [
            p + q + run for p in string.ascii_uppercase for q in string.ascii_uppercase]
        words.append(next(w for w in tries if i in tok.encode(" " + w).ids))
    return words


def tokenizer():
    global _tok
    if _tok is None:
        from tokenizers import Tokenizer
        _tok = Tokenizer.from_file(TOKENIZER)
        curriculum.CODE_WORDS = code_words(_tok)
    return _tok


def encode_example(e):
    """ids, and a 0/1 mask of the positions the model is trained to predict."""
    tok = tokenizer()
    p = tok.encode(e.prompt).ids if e.prompt else []
    a = tok.encode(e.answer).ids
    return p + a, [0] * len(p) + [1] * len(a)


def _chunk(args):
    """ROWS_PER_CHUNK rows of length T from the stream of chunk `c`."""
    seed, c, T = args
    eot = tokenizer().token_to_id("<|endoftext|>")
    stream = curriculum.examples(seed * 1_000_003 + c)
    ids = np.full((ROWS_PER_CHUNK, T), eot, dtype=np.int32)
    labels = np.full((ROWS_PER_CHUNK, T), -100, dtype=np.int32)
    # Enough examples for the chunk, packed first-fit by decreasing length so the mixture is kept;
    # the few that fit nowhere are dropped, the rest of a row is <|endoftext|> (no loss).
    examples, total = [], 0
    while total < ROWS_PER_CHUNK * T:
        x, m = encode_example(next(stream))
        if x[-1] != eot:  # chat examples end in <|im_end|>: add the separator
            x, m = x + [eot], m + [0]
        if len(x) <= T:  # longer ones would lose their answer
            examples.append((x, m))
            total += len(x)
    fill = [0] * ROWS_PER_CHUNK
    for x, m in sorted(examples, key=lambda e: -len(e[0])):
        r = next((r for r in range(ROWS_PER_CHUNK) if fill[r] + len(x) <= T), None)
        if r is None:
            continue
        ids[r, fill[r]:fill[r] + len(x)] = x
        labels[r, fill[r]:fill[r] + len(x)] = np.where(np.array(m) == 1, x, -100)
        fill[r] += len(x)
    # Longest examples were packed first: shuffle rows so every batch gets the same mixture.
    order = np.random.default_rng([seed, c]).permutation(ROWS_PER_CHUNK)
    return ids[order], labels[order]


def _prefetched(jobs, workers):
    """Chunks in order from a process pool, at most 2·workers ahead (Pool.imap would run ahead
    without bound on an endless stream)."""
    pool = mp.get_context("fork").Pool(workers)
    pending = collections.deque(pool.apply_async(_chunk, (next(jobs),)) for _ in range(2 * workers))
    while True:
        result = pending.popleft().get()
        pending.append(pool.apply_async(_chunk, (next(jobs),)))
        yield result


def batches(seed, T, batch, start_row=0, workers=0):
    """Endless (ids, labels) int64 arrays [batch, T], starting at row `start_row`."""
    assert batch % ROWS_PER_CHUNK == 0 or ROWS_PER_CHUNK % batch == 0
    first = start_row // ROWS_PER_CHUNK
    jobs = ((seed, c, T) for c in itertools.count(first))
    chunks = _prefetched(jobs, workers) if workers > 0 else map(_chunk, jobs)
    ids_buf, lab_buf = [], []
    skip = start_row - first * ROWS_PER_CHUNK
    for ids, labels in chunks:
        ids_buf.append(ids[skip:])
        lab_buf.append(labels[skip:])
        skip = 0
        while sum(len(b) for b in ids_buf) >= batch:
            ids_all, lab_all = np.concatenate(ids_buf), np.concatenate(lab_buf)
            yield ids_all[:batch].astype(np.int64), lab_all[:batch].astype(np.int64)
            ids_buf, lab_buf = [ids_all[batch:]], [lab_all[batch:]]


def eval_set(kind, n, seed=0):
    """n held-out examples of one kind (prompt ids, answer ids)."""
    tok = tokenizer()
    out = []
    for e in curriculum.examples(seed, "eval"):
        if e.kind == kind:
            out.append((tok.encode(e.prompt).ids, tok.encode(e.answer).ids))
            if len(out) == n:
                return out
