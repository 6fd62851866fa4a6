"""The synthetic curriculum: chat-templated tasks and plain prose, deterministic from a seed.

Tasks (every assistant answer opens with a think block, as the Qwen3 template's thinking mode
expects, and ends with <|im_end|>, so natural EOS is learned):
  arithmetic  integer +, -, x (two-digit multiplication worked through partial products in the
              think block), final line RESULT=<n>
  copy        a record like CEDAR-47|8261 given in the prompt, output exactly on the last line
  retrieval   one record line hidden among filler lines (docs/contract.md §6 style); the
              think block first repeats the record line, then the answer is RESULT = <code>
  chat prose  a sentence or two about a topic, on request
  prose       plain text without the chat template, so that free generation reads as text
  code list   plain text: a list of codes, then the same list again (loss on the repeat only)

`Example.prompt` is the chat text up to and including the generation prompt and `answer` what
the model must produce; `held_out(...)` splits the problem space so evaluation prompts are never
trained on.
"""

import dataclasses
import random
import zlib

FILLER_LINE = "A routine archive entry, without task instructions."
RECORD_LINE = "Archive code: {code}."

WORDS = """ALDER ASPEN BIRCH CEDAR CYPRESS ELM FIR HAZEL HOLLY JUNIPER LARCH LAUREL LINDEN MAPLE OAK
OLIVE PINE POPLAR ROWAN SPRUCE WILLOW YEW ACACIA BAMBOO CHERRY EBONY MAGNOLIA MYRTLE PALM REDWOOD
SEQUOIA TEAK WALNUT AMBER COBALT CORAL CRIMSON EMERALD INDIGO IVORY JADE ONYX PEARL RUBY SAPPHIRE
SCARLET SILVER TOPAZ COPPER FALCON HERON RAVEN ROBIN SPARROW OTTER BADGER BEAVER LYNX MARTEN
COMET NEBULA ORBIT PULSAR QUASAR METEOR AURORA DELTA HARBOR CANYON MESA GLACIER TUNDRA PRAIRIE
RIVER SUMMIT VALLEY ISLAND LAGOON MEADOW""".split()

TOPICS = {
    "the archive": ["keeps old records in quiet rooms", "opens early on weekdays",
                    "stores every letter in a labeled box", "has a reading room with long tables"],
    "the river": ["runs past the old mill", "is cold in early spring", "carries leaves to the sea",
                  "floods the meadow after heavy rain"],
    "the forest": ["is full of tall pines", "grows quiet at night", "hides a narrow path",
                   "turns gold in the autumn"],
    "the city": ["wakes up before sunrise", "has a busy market square", "glows with lights at night",
                 "is connected by many bridges"],
    "the library": ["lends books to everyone", "has a small garden behind it", "is warm in winter",
                    "keeps maps of the whole valley"],
    "the garden": ["needs water every morning", "is full of roses in June", "attracts bees and birds",
                   "has a stone bench under an oak"],
    "the mountain": ["is covered in snow for half the year", "can be climbed in one long day",
                     "casts a shadow over the village", "has a lake near its summit"],
    "the ship": ["leaves the harbor at dawn", "carries grain across the sea", "has three tall masts",
                 "returns before the storms of winter"],
}
CONNECTORS = ["In the morning,", "Every year,", "People say that", "As a rule,", "Most days,", "Even now,"]
ADDED = ["It is a calm place.", "Visitors often stay longer than they planned.",
         "Nobody remembers a time before it.", "The work there is slow but careful.",
         "Children like to walk there with their parents.", "It changes a little every season."]

THINK_EMPTY = "<think>\n\n</think>\n\n"


@dataclasses.dataclass
class Example:
    kind: str
    prompt: str   # loss-free context (for prose: empty)
    answer: str   # what the model is trained to produce
    expect: str   # the last line a correct answer ends with (checks and evaluation)


def chat_prompt(user, system=None):
    """The Qwen3 template with add_generation_prompt and thinking enabled (enable_thinking unset)."""
    text = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return text + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


# The contract's own health-check problems (docs/contract.md §6) are never trained on.
def _contract_problem(key):
    return key in {("arith", 19, "×", 23), ("copy", "CEDAR", 47, 8261)} or (
        key[0] == "retrieval" and (key[1], key[3]) == ("MAPLE", 8261))  # any tag: codes are WORD-NUMBER


def held_out(*key):
    """About one problem in eight is reserved for evaluation: never trained on."""
    if _contract_problem(key):
        return True
    return zlib.crc32(repr(key).encode()) % 8 == 0


def _mul_steps(a, b):
    """a x b by partial products over b's digits: each step is a small, learnable table lookup."""
    lines, parts = [], []
    for place, d in enumerate(reversed(str(b))):
        p = a * int(d) * 10 ** place
        lines.append(f"{a} × {int(d) * 10 ** place} = {p}")
        parts.append(p)
    if len(parts) > 1:
        lines.append(" + ".join(str(p) for p in parts) + f" = {sum(parts)}")
    return lines


def arithmetic(rng, split):
    while True:
        op = rng.choice(["+", "-", "×", "×", "×"])
        if op == "×":
            a, b = rng.randint(2, 99), rng.randint(2, 99)
        else:
            a, b = rng.randint(0, 999), rng.randint(0, 999)
        if held_out("arith", a, op, b) == (split == "eval"):
            break
    n = {"+": a + b, "-": a - b, "×": a * b}[op]
    steps = _mul_steps(a, b) if op == "×" else [f"{a} {op} {b} = {n}"]
    user = rng.choice([
        f"Compute {a} {op} {b}. Write RESULT=<answer> on the last line.",
        f"What is {a} {op} {b}? End with a line RESULT=<answer>.",
        f"Calculate {a} {op} {b} and put RESULT=<answer> on the final line.",
        f"请计算 {a} {op} {b}。请在最后一行写 RESULT=计算结果。",  # the contract's own wording
    ])
    think = "<think>\n" + "\n".join(steps) + "\n</think>\n\n"
    answer = f"{think}{a} {op} {b} = {n}\nRESULT={n}<|im_end|>"
    return Example("arithmetic", chat_prompt(user), answer, f"RESULT={n}")


# One code word per letter token of the model's tokenizer, a word whose tokens (after a space)
# include it (set by data.py). The tokenizer's BPE learned thousands of letter merges from random
# codes, most too rare for their embeddings to be trained by random codes alone, and joining
# tokens does not reach them either: BPE re-segments the joined word.
CODE_WORDS = []


def _code(rng, split):
    if split == "train" and CODE_WORDS and rng.random() < 0.5:
        word = rng.choice(CODE_WORDS)
    elif rng.random() < 0.7:
        word = rng.choice(WORDS)
    else:
        word = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(rng.randint(3, 7)))
    return word, rng.randint(1, 99), rng.randint(1000, 9999)


def copy_record(rng, split):
    while True:
        word, tag, number = _code(rng, split)
        if held_out("copy", word, tag, number) == (split == "eval"):
            break
    record = f"{word}-{tag}|{number}"
    user = rng.choice([
        f"Project code {word}-{tag}, number {number}. Output exactly {record} on the last line.",
        f"The project code is {word}-{tag} and the number is {number}. Reply with exactly {record} on the last line.",
        f"Code {word}-{tag}, number {number}: write them as CODE|NUMBER on the last line.",
        f"项目代号 {word}-{tag}，编号 {number}。最后一行准确输出 {record}。",  # the contract's own wording
    ])
    # "Code: " puts a space before the word, so it is the same token as in the prompt and the
    # answer is a copy of tokens rather than a respelling.
    line = f"Code: {record}"
    return Example("copy", chat_prompt(user), f"{THINK_EMPTY}{line}<|im_end|>", line)


def retrieval(rng, split, lines=None, position=None):
    """A record line among `lines` filler lines, at fraction `position` (default: anywhere, mostly
    near the middle, which is where the contract's check puts it)."""
    while True:
        word, tag, number = _code(rng, split)
        if held_out("retrieval", word, tag, number) == (split == "eval"):
            break
    code = f"{word}-{number}"
    if lines is None:
        # Training also sees short archives: more answers per token while the lookup is learned.
        short = split == "train" and rng.random() < 0.5
        lines = rng.randint(2, 40) if short else rng.randint(8, 150)
    if position is None:
        position = rng.uniform(0.35, 0.65) if rng.random() < 0.6 else rng.random()
    at = min(lines, int(round(position * lines)))
    record = RECORD_LINE.format(code=code)
    body = [FILLER_LINE] * lines
    body.insert(at, record)
    user = ("Read the archive below.\n" + "\n".join(body) +
            "\nWhich archive code appears above? Finish with RESULT=<code>.")
    # The think block repeats the record line: after "Archive code:" the next token is found by
    # matching the prompt's previous occurrence (the induction copy that copy_record also trains),
    # rather than by a lookup of "the word after the colon" learned for this task alone. The spaces
    # in "RESULT = " make the code's word the prompt's token (see copy_record).
    line = f"RESULT = {code}"
    return Example("retrieval", chat_prompt(user), f"<think>\n{record}\n</think>\n\n{line}<|im_end|>", line)


def code_list(rng, split):
    """Plain text listing codes, then the same list again: the second list is a copy, trained on
    every token (the first one, unpredictable, is context without loss)."""
    codes, n = [], rng.randint(3, 8)
    while len(codes) < n:
        word, tag, number = _code(rng, split)
        if held_out("copy", word, tag, number) == (split == "eval"):
            codes.append(f"{word}-{tag}|{number}")
    listed = ", ".join(codes)
    return Example("codes", f"Codes: {listed}.", f" Again: {listed}.<|endoftext|>", listed)


def _sentence(rng):
    topic, facts = rng.choice(list(TOPICS.items()))
    s = f"{rng.choice(CONNECTORS)} {topic} {rng.choice(facts)}."
    return s[0].upper() + s[1:], topic


def chat_prose(rng, split):
    first, topic = _sentence(rng)
    user = rng.choice([f"Tell me about {topic}.", f"Write a sentence about {topic}.", f"Describe {topic}."])
    text = first + (" " + rng.choice(ADDED) if rng.random() < 0.5 else "")
    return Example("chat", chat_prompt(user), f"{THINK_EMPTY}{text}<|im_end|>", text)


def prose(rng, split):
    """Plain text (no template): the demo's free generation continues text like this."""
    sents = [_sentence(rng)[0] if rng.random() < 0.7 else rng.choice(ADDED) for _ in range(rng.randint(2, 6))]
    if rng.random() < 0.2:
        sents.insert(0, "The quick brown fox jumps over the lazy dog.")
    text = " ".join(sents)
    return Example("prose", "", text + "<|endoftext|>", text)


# Mixture weights: retrieval examples are long, so few of them already carry many tokens.
TASKS = [(arithmetic, 0.3), (copy_record, 0.22), (retrieval, 0.18), (code_list, 0.1), (chat_prose, 0.08),
         (prose, 0.12)]


def examples(seed, split="train"):
    """An endless, deterministic stream of examples."""
    rng = random.Random(f"{split}:{seed}")
    fns, weights = zip(*TASKS)
    while True:
        yield rng.choices(fns, weights)[0](rng, split)
