#!/usr/bin/env python3
"""The training curriculum's promises, checked on thousands of drawn examples: determinism, answers
that are right and end with an end token, and evaluation problems kept out of training."""

import os
import re
import sys
import unittest
from itertools import islice

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import curriculum  # noqa: E402

N = 3000


def draw(seed, split, n=N):
    return list(islice(curriculum.examples(seed, split), n))


def arithmetic_key(ex):
    a, op, b = re.search(r"(-?\d+) ([-+×]) (-?\d+)", ex.prompt).groups()
    return int(a), op, int(b)


def copy_key(ex):
    word, tag, number = re.search(r"(\S+)-(\d+)\|(\d+)$", ex.expect).groups()
    return word, int(tag), int(number)


class Curriculum(unittest.TestCase):
    def test_same_seed_same_stream(self):
        self.assertEqual(draw(1, "train", 200), draw(1, "train", 200))
        self.assertNotEqual(draw(1, "train", 200), draw(2, "train", 200))
        self.assertNotEqual(draw(1, "train", 200), draw(1, "eval", 200))

    def test_every_answer_ends_its_turn_or_text(self):
        for ex in draw(3, "train"):
            chat = ex.prompt.startswith("<|im_start|>")
            self.assertTrue(ex.answer.endswith("<|im_end|>" if chat else "<|endoftext|>"), ex)
            if chat:
                self.assertTrue(ex.prompt.endswith("<|im_start|>assistant\n"), ex)
                self.assertRegex(ex.answer, r"^<think>\n(.|\n)*</think>\n\n")
            end = "<|im_end|>" if chat else ("." + "<|endoftext|>" if ex.kind == "codes" else "<|endoftext|>")
            self.assertTrue(ex.answer.endswith(ex.expect + end), ex)

    def test_arithmetic_is_right_and_its_steps_add_up(self):
        seen = 0
        for ex in draw(4, "train"):
            if ex.kind != "arithmetic":
                continue
            seen += 1
            a, op, b = arithmetic_key(ex)
            n = {"+": a + b, "-": a - b, "×": a * b}[op]
            self.assertEqual(ex.expect, f"RESULT={n}")
            for x, y, z in re.findall(r"^(\d+) × (\d+) = (\d+)$", ex.answer, re.M):
                self.assertEqual(int(x) * int(y), int(z))
            sums = re.findall(r"^([\d +]+) = (\d+)$", ex.answer, re.M)
            for terms, total in sums:
                self.assertEqual(sum(int(t) for t in terms.split("+")), int(total))
        self.assertGreater(seen, N // 5)

    def test_copies_and_retrievals_answer_with_what_the_prompt_holds(self):
        for ex in draw(5, "train"):
            if ex.kind == "copy":
                word, tag, number = copy_key(ex)
                self.assertIn(f"{word}-{tag}", ex.prompt)
                self.assertIn(str(number), ex.prompt)
            elif ex.kind == "retrieval":
                code = ex.expect.removeprefix("RESULT = ")
                self.assertEqual(ex.prompt.count(code), 1, ex.prompt)
                self.assertIn(curriculum.RECORD_LINE.format(code=code), ex.answer)

    def test_evaluation_problems_are_never_trained_on(self):
        def keys(split):
            out = set()
            for ex in draw(6, split, 2 * N):
                if ex.kind == "arithmetic":
                    out.add(("arith",) + arithmetic_key(ex))
                elif ex.kind == "copy":
                    out.add(("copy",) + copy_key(ex))
            return out

        train, held = keys("train"), keys("eval")
        self.assertTrue(held)
        self.assertFalse(train & held)
        self.assertNotIn(("arith", 19, "×", 23), train)
        self.assertNotIn(("copy", "CEDAR", 47, 8261), train)
        self.assertTrue(all(curriculum.held_out(*k) for k in held))

    def test_code_words_are_drawn_in_training_only(self):
        saved = curriculum.CODE_WORDS
        curriculum.CODE_WORDS = ["QZXJV"]
        try:
            words = lambda split: {copy_key(ex)[0] for ex in draw(7, split, 600) if ex.kind == "copy"}  # noqa: E731
            self.assertIn("QZXJV", words("train"))
            self.assertNotIn("QZXJV", words("eval"))
        finally:
            curriculum.CODE_WORDS = saved


if __name__ == "__main__":
    unittest.main()
