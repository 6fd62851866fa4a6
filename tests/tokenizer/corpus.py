"""Deterministic text generators for the tokenizer parity fixture and benchmark.

Everything is drawn from random.Random(seed), so the same seed gives the same strings on every
machine and Python version (only random.Random's documented, stable methods are used).
"""

import random
import unicodedata

WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by one "
    "had not but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like him see "
    "time could no make than first been its who now people my made over did down only way find "
    "use may water long little very after words called just where most know get through back "
    "much before go good new write our used me man too any day same right look think also around "
    "another came come work three word must because does part even place well such here take why "
    "things help put years different away again off went old number great tell men say small "
    "every found still between name should home big give air line set own under read last never "
    "us left end along while might next sound below saw something thought both few those always "
    "looked show large often together asked house don't world going want school important until "
    "form food keep children feet land side without boy once animals life enough took sometimes "
    "four head above kind began almost live page got earth need far hand high year mother light "
    "parts country father let night following picture being study second eyes soon times story "
    "boys since white days ever paper hard near sentence better best across during today others "
    "however sure means knew it's try told young miles sun ways thing whole hear example heard "
    "several change answer room sea against top turned learn point city play toward five using "
    "himself usually tokenizer inference server latency throughput kernel tensor gradient model "
    "transformer attention quantization benchmark deterministic Unicode normalization GPU CUDA "
    "Paris London Tokyo Beijing Zürich São Paulo naïve café résumé coöperate façade piñata"
).split()

CODE_SNIPPETS = [
    'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
    'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n',
    '#include <vector>\n#include "absl/status/status.h"\n\nnamespace q38 {\nint main(int argc, char** argv) {\n  return 0;\n}\n}  // namespace q38\n',
    'const x = await fetch(`https://example.com/api?q=${encodeURIComponent(q)}`);\nconsole.log(x?.status ?? -1);\n',
    '{"name": "q38", "version": "0.1.0", "deps": [1, 2.5, -3e10, null, true], "nested": {"k": "v\\n"}}',
    'SELECT id, COUNT(*) AS n FROM events WHERE ts >= \'2024-01-01\' GROUP BY id HAVING n > 10;\n',
    'if [[ -z "$HOME" ]]; then\n  echo "no home" >&2; exit 1\nfi\nfor f in *.txt; do wc -l "$f"; done\n',
    'class Foo(Bar):\n    """Docstring with \'quotes\' and "double"."""\n    x: int = 0x1F\n    def __init__(self, *args, **kw) -> None:\n        super().__init__(*args, **kw)\n',
    'template <typename T>\nstd::unique_ptr<T> Make(T&& v) { return std::make_unique<T>(std::forward<T>(v)); }\n',
    'x = [i**2 for i in range(10) if i % 3 == 0]  # squares\nprint(f"{x!r:>20}")\n',
    'fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!("{:?}", v);\n    Ok(())\n}\n',
    '<div class="row"><a href="/x?a=1&amp;b=2">link</a></div>\r\n<!-- comment -->\r\n',
    'diff --git a/f.py b/f.py\n@@ -1,3 +1,4 @@\n-old = 1\n+new = 2\n+    indented = True\n',
    '    \t  mixed_indent = {\n\t\t"tabs": 2,\n        "spaces": 8,\n    }\n',
    'a+=1;b-=2;c*=3;d/=4;e%=5;f<<=6;g>>=7;h&=8;i|=9;j^=10;k&&=l||m!==n===o<=>p',
]

CHINESE = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么"
           "心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样"
           "现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打"
           "便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总"
           "才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王"
           "果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科"
           "怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父"
           "强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商"
           "千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜")
CJK_PUNCT = "，。！？、；：「」『』（）《》…—·"
HIRAGANA = "".join(chr(c) for c in range(0x3041, 0x3097))
KATAKANA = "".join(chr(c) for c in range(0x30A1, 0x30FB)) + "ー"
KANJI = "日本語東京大学電車食事新聞会社時間今年先生友達天気映画音楽写真旅行料理勉強仕事家族子供"
ARABIC = "".join(chr(c) for c in range(0x0621, 0x064B))
ARABIC_MARKS = "".join(chr(c) for c in range(0x064B, 0x0653))
ARABIC_DIGITS = "٠١٢٣٤٥٦٧٨٩"
CYRILLIC = "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ"
GREEK = "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩάέήίόύώ"
DEVANAGARI = "अआइईउऊऋएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसह" + "ािीुूृेैोौंः्"
THAI = "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮะัาำิีึืุูเแโใไๅๆ็่้๊๋์"
HEBREW = "אבגדהוזחטיכלמנסעפצקרשת"

EMOJI = ["😀", "😂", "🥲", "❤️", "👍", "👍🏽", "🎉", "🚀", "🔥", "✨", "🙏🏿", "🤖", "🧪", "📦", "☕",
         "👨‍👩‍👧‍👦", "👩🏻‍💻", "🏳️‍🌈", "🏴‍☠️", "🧑‍🤝‍🧑", "❤️‍🔥", "🇺🇸", "🇯🇵", "🇩🇪", "🇨🇳", "🇧🇷",
         "1️⃣", "#️⃣", "©️", "™", "🫠", "🪐", "🏄‍♀️", "👁️‍🗨️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]

SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r",
          " \n", "\n ", " \t\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e",
          "\u2009", "\u200b", "\u202f", "\u205f", "\u000b", "\u000c", "\u001c", "\u001f", "        "]

# Strings that NFC changes (decomposed forms, singletons, reordering) and their neighbours.
NFC_CASES = ["e\u0301", "E\u0300", "A\u030a", "\u212b", "\u2126", "o\u0308", "u\u0308ber",
             "n\u0303", "a\u0323\u0302", "a\u0302\u0323", "\u1100\u1161", "\u1100\u1161\u11a8",
             "\uac00\u11a8", "\u304b\u3099", "\u30cf\u309a", "\u0344", "\u0958", "\uf900",
             "\u1e9b\u0323", "q\u0307\u0323", "\u0915\u093c", "\u0dd9\u0dca", "\u0b47\u0b3e",
             "Cafe\u0301", "re\u0301sume\u0301", "\u0301leading", "x\u0301\u0301\u0301", "Ä", "é"]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>user\n", "<|im_start|>assistant\n",
            "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|vision_start|>",
            "<|image_pad|>", "<|im_start", "im_end|>", "<|", "|>", "<|im_end|><|im_end|>",
            "<tool_response>", "<|box_start|>", "<|file_sep|>"]

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D",
                "\u2019s", "'\u017f", "'\u212a", "n't", "'", "''", "'x"]


def _pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def sentence(rng, n=None):
    n = n or rng.randint(4, 18)
    words = [_pick(rng, WORDS) for _ in range(n)]
    if rng.random() < 0.5:
        words[0] = words[0].capitalize()
    if rng.random() < 0.2:
        i = rng.randrange(n)
        words[i] = words[i] + _pick(rng, CONTRACTIONS)
    if rng.random() < 0.15:
        words[rng.randrange(n)] = str(rng.randint(0, 10 ** rng.randint(1, 9)))
    if rng.random() < 0.1:
        words[rng.randrange(n)] = words[rng.randrange(n)].upper()
    end = _pick(rng, [".", ".", ".", "!", "?", "...", ":", ";", ""])
    text = " ".join(words) + end
    if rng.random() < 0.1:
        text = '"' + text + '"'
    return text


def prose(rng, sentences=None):
    sentences = sentences or rng.randint(1, 6)
    return " ".join(sentence(rng) for _ in range(sentences))


def code(rng):
    parts = [_pick(rng, CODE_SNIPPETS) for _ in range(rng.randint(1, 3))]
    text = "\n".join(parts)
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.2:
        text = text.replace("    ", "\t")
    return text


def chars(rng, alphabet, lo, hi):
    return "".join(_pick(rng, alphabet) for _ in range(rng.randint(lo, hi)))


def chinese(rng):
    out = []
    for _ in range(rng.randint(1, 5)):
        out.append(chars(rng, CHINESE, 3, 25) + _pick(rng, CJK_PUNCT))
        if rng.random() < 0.2:
            out.append(_pick(rng, WORDS) + " " + str(rng.randint(0, 9999)))
    return "".join(out)


def japanese(rng):
    out = []
    for _ in range(rng.randint(1, 5)):
        for _ in range(rng.randint(1, 4)):
            out.append(_pick(rng, [chars(rng, HIRAGANA, 1, 6), chars(rng, KATAKANA, 2, 6), chars(rng, KANJI, 1, 4)]))
        if rng.random() < 0.3:
            out.append(_pick(rng, ["\u304b\u3099", "\u306f\u309a", "\u30bf\u3099", "\uff76\uff9e"]))
        out.append(_pick(rng, "。、！？「」"))
    return "".join(out)


def korean(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        word = "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.2:  # a decomposed syllable that NFC composes
            word += chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21))
            if rng.random() < 0.5:
                word += chr(0x11A8 + rng.randrange(27))
        out.append(word)
    return " ".join(out) + _pick(rng, [".", "?", "!", ""])


def arabic(rng):
    words = []
    for _ in range(rng.randint(2, 10)):
        w = chars(rng, ARABIC, 2, 7)
        if rng.random() < 0.3:
            w = "".join(c + (_pick(rng, ARABIC_MARKS) if rng.random() < 0.5 else "") for c in w)
        words.append(w)
    if rng.random() < 0.4:
        words.append(chars(rng, ARABIC_DIGITS, 1, 6))
    return " ".join(words) + _pick(rng, ["؟", "،", ".", ""])


def other_scripts(rng):
    alphabet = _pick(rng, [CYRILLIC, GREEK, DEVANAGARI, THAI, HEBREW])
    return " ".join(chars(rng, alphabet, 1, 9) for _ in range(rng.randint(1, 8)))


def emoji(rng):
    out = []
    for _ in range(rng.randint(1, 10)):
        out.append(_pick(rng, EMOJI))
        r = rng.random()
        if r < 0.3:
            out.append(" ")
        elif r < 0.4:
            out.append(_pick(rng, WORDS))
    return "".join(out)


def digits(rng):
    kind = rng.randrange(7)
    if kind == 0:
        return str(rng.randint(0, 10 ** rng.randint(1, 40)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
    if kind == 2:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 120)))
    if kind == 3:
        return "v" + ".".join(str(rng.randint(0, 99)) for _ in range(rng.randint(2, 4))) + "-rc" + str(rng.randint(0, 9))
    if kind == 4:
        return "".join(_pick(rng, "０１２３４５６７８９²³¹½⅓Ⅷ٣۴१२௧") for _ in range(rng.randint(1, 12)))
    if kind == 5:
        return f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(1900, 2100)} {rng.randint(0, 23)}:{rng.randint(0, 59):02d}"
    return "+1 (" + str(rng.randint(100, 999)) + ") " + str(rng.randint(100, 999)) + "-" + str(rng.randint(1000, 9999))


def whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        out.append(_pick(rng, SPACES) * rng.randint(1, 3))
        if rng.random() < 0.6:
            out.append(_pick(rng, WORDS + ["!", "x", "1", "中", "."]))
    return "".join(out)


def nfc(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        out.append(_pick(rng, NFC_CASES))
        if rng.random() < 0.5:
            out.append(_pick(rng, [" ", "", "-", _pick(rng, WORDS)]))
    return "".join(out)


def specials(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.45:
            out.append(_pick(rng, SPECIALS))
        elif r < 0.8:
            out.append(sentence(rng, rng.randint(1, 5)))
        else:
            out.append(_pick(rng, SPACES))
    return "".join(out)


def contractions(rng):
    return " ".join(_pick(rng, WORDS) + _pick(rng, CONTRACTIONS) for _ in range(rng.randint(1, 6)))


_ASSIGNED = None


def _assigned_codepoints():
    """Code points with a Unicode 14 category other than Cn (unassigned) and Cs (surrogate)."""
    global _ASSIGNED
    if _ASSIGNED is None:
        _ASSIGNED = [c for c in range(0x20, 0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    return _ASSIGNED


def random_unicode(rng):
    cps = _assigned_codepoints()
    out = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.7:
            out.append(chr(cps[rng.randrange(len(cps))]))
        elif r < 0.85:
            out.append(" ")
        else:
            out.append(chr(rng.randrange(0x20, 0x7F)))
    return "".join(out)


def mixed(rng):
    gens = [prose, code, chinese, japanese, korean, arabic, emoji, digits, whitespace, nfc, specials,
            other_scripts, contractions]
    return _pick(rng, ["", " ", "\n", "\t"]).join(_pick(rng, gens)(rng) for _ in range(rng.randint(2, 5)))


CATEGORIES = [
    ("prose", prose, 260), ("code", code, 220), ("chinese", chinese, 130), ("japanese", japanese, 130),
    ("korean", korean, 110), ("arabic", arabic, 110), ("other_scripts", other_scripts, 90),
    ("emoji", emoji, 120), ("digits", digits, 130), ("whitespace", whitespace, 140), ("nfc", nfc, 110),
    ("specials", specials, 150), ("contractions", contractions, 60), ("random_unicode", random_unicode, 150),
    ("mixed", mixed, 200),
]


def fixture_strings(seed=38):
    """(category, text) pairs: every category above, then edge cases and very long strings."""
    rng = random.Random(seed)
    out = []
    for name, gen, count in CATEGORIES:
        for _ in range(count):
            out.append((name, gen(rng)))
    edge = ["", " ", "  ", "\n", "\r\n", "\t", "a", "A", "'", "'s", "0", "00", "<", "<|", "<|im_end|>",
            "<|im_end|> ", " <|im_end|>", "\u0301", "e\u0301", "🇺", "🇺🇸🇺", "\u200d", "\ufeffBOM", "\x00",
            "a\x00b", "\x7f", "\U0010fffd", "\ue000", "ab\r\n\r\n  cd  \n", "   x", "x   ", "\n\n\nx\n\n\n",
            "Hello, world!", "hello world", "HELLO WORLD", "it's", "IT'S", "you'll", "don't",
            "\u0085x", "x\u180ey", "\u3000\u3000x", " \u00a0 x", "a\u2028b",
            # where Oniguruma and PCRE2 disagree unless the pattern is translated: case folding
            # of 's' to U+017F and 'k' to U+212A, and U+180E / U+0085 as white space
            "it'\u017felf", "x'\u017fy", "'\u017ftop", "'\u017f", "don'\u212aelvin", "'\u212a",
            "I'LL be there", "we'Re", "THEY'VE", "a\u180e\u180eb", "\u180e\u180e!", "a\u180e\u180e",
            " \u180e x", "\u0085\u0085x", "x\u0085\u0085\u0085", "x \u0085 y", "\u180e\n\u180e"]
    out += [("edge", s) for s in edge]
    long = [
        prose(rng, 400),                                  # ~40 KB of prose
        "".join(code(rng) for _ in range(60)),            # ~25 KB of code
        chinese(rng) * 60,
        "a" * 20000,                                      # one 20 KB \p{L}+ piece
        " " * 10000 + "x",                                # long whitespace run
        "\n" * 3000 + "y",
        "=" * 5000,
        "9" * 8000,
        "🙂" * 3000,
        "e\u0301" * 4000,                                 # NFC changes every other code point
        "ab " * 5000,
        "<|im_end|>" * 500,
    ]
    out += [("long", s) for s in long]
    return out


def bench_documents(target_bytes, seed=3838):
    """Documents of mixed prose (about half), code and some multilingual text."""
    rng = random.Random(seed)
    docs, total = [], 0
    while total < target_bytes:
        r = rng.random()
        if r < 0.5:
            doc = "\n\n".join(prose(rng, rng.randint(3, 12)) for _ in range(rng.randint(2, 10)))
        elif r < 0.9:
            doc = "\n".join(code(rng) for _ in range(rng.randint(3, 20)))
        else:
            doc = "\n".join(_pick(rng, [chinese, japanese, korean, arabic, emoji, other_scripts])(rng)
                            for _ in range(rng.randint(3, 15)))
        docs.append(doc)
        total += len(doc.encode("utf-8"))
    return docs
