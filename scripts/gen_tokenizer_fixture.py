#!/usr/bin/python3
"""Write testdata/tokenizer/sentencepiece_golden.json for tokenizer/golden_test.go.

The reference is SentencePiece itself (Debian's python3-sentencepiece, 0.1.97)
with Meta's Llama 2 tokenizer.model. The Go test loads the same 32000 pieces
from ggml-vocab-llama-spm.gguf and must reproduce every id list exactly.

Cases: lines of TinyStories V1 and V2, hand-written hard cases (unicode, CJK,
emoji, digits, whitespace runs, newlines, byte fallback) and seeded random
strings. Each case stores the text, the ids from EncodeAsIds (no BOS/EOS) and,
when it differs from the text, what DecodeIds returns.

Run from the repository root:
    /usr/bin/python3 scripts/gen_tokenizer_fixture.py [--data ../shared/data]
(/usr/bin/python3 because a pyenv python on PATH lacks the Debian package.)
"""

import argparse
import hashlib
import json
import os
import random
import sys

import sentencepiece as spm

FORMAT = "modrun-tokenizer-golden/1"
OUT = "testdata/tokenizer/sentencepiece_golden.json"
SEED = 20240601
MAX_LINE = 300  # characters; keeps the fixture under 1.5 MB
N_V1 = 1300
N_V2 = 800
N_RANDOM = 300

HAND_CASES = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "a",
    " a",
    "a ",
    "  leading and trailing  ",
    "multiple     spaces     inside",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four\n",
    "\n\nstarts with newlines",
    "ends with spaces   ",
    "0",
    "1234567890",
    "3.14159 2.71828 1e-10 -42 +7 0x1F 1,000,000",
    "phone: +1 (555) 010-9999, zip 90210",
    "Hello, world! How's it going? I'm fine; you're great.",
    "It's, isn't, wouldn't've, y'all, o'clock, rock 'n' roll",
    "\"quoted\" 'single' \u201ccurly\u201d \u2018curly\u2019",
    "em\u2014dash en\u2013dash ellipsis\u2026",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "e\u0301 combining acute vs \u00e9 precomposed",
    "\u00c4pfel \u00d6l \u00dcbel",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u1780\u17b6\u1793\u17cb\u178f\u17c2",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u9f98\u9f96\u7ea1\u9a6b",  # rare CJK: byte fallback
    "\U00020000\U0002a6d6 CJK extension B",
    "\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705 (only emoji that has its own token)",
    "\U0001f44d\U0001f3fd thumbs up, skin tone",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "\U0001f1fa\U0001f1f8 \U0001f1ef\U0001f1f5 flags",
    "\U0001f999.cpp",
    "\u2581 literal lower one eighth block",
    "\u2581\u2581a\u2581b",
    "<s> not BOS </s> not EOS <unk>",
    "<0x41> is text, not a byte token",
    "\x00 NUL and \x01 SOH and \x7f DEL",
    "bell\x07 backspace\x08 formfeed\x0c vtab\x0b",
    "\ue000\uf8ff private use",
    "\U0010fffd last plane",
    "\ufeffBOM at start",
    "zero\u200bwidth\u200cnon\u200djoiner",
    "\u00a0no-break\u00a0space\u3000ideographic space",
    "fullwidth \uff21\uff22\uff23\uff11\uff12\uff13",
    "math \u2211\u222b\u221a\u221e\u2264\u2265\u2260 \U0001d400\U0001d401",
    "!!!!!!",
    "??? ... ,,, ;;; ---",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ababababababababababababababababababababababababab",
    "https://example.com/path?query=1&x=y#frag",
    "user@example.com",
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body class=\"x\">Hi</body></html>",
    "    Hello\n    Hello",
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
    "Cu\u0309a Vi\u1ec7t",
    "C\u1eeda Vi\u1ec7t",
    "w048 7tuijk dsdfhu",
]


def long_cases(rng):
    """A few longer lines with no spaces, where merges run deep."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [
        "".join(rng.choice(letters) for _ in range(2000)),
        "the" * 500,
        "\u4e2d\u6587" * 300,
        "\U0001f600" * 100,
        "1234567890" * 100,
    ]


# Code point ranges random strings draw from: ASCII-heavy, with scripts the
# vocab covers well, poorly (byte fallback), and not at all.
RANDOM_RANGES = [
    (0x20, 0x7E, 40),
    (0x09, 0x0A, 3),
    (0xA0, 0x24F, 6),
    (0x370, 0x3FF, 3),
    (0x400, 0x4FF, 4),
    (0x590, 0x6FF, 2),
    (0x900, 0x97F, 2),
    (0x1780, 0x17FF, 2),
    (0x2000, 0x2BFF, 4),
    (0x3040, 0x30FF, 3),
    (0x4E00, 0x9FFF, 6),
    (0xAC00, 0xD7A3, 2),
    (0xE000, 0xF8FF, 1),
    (0xFF00, 0xFFEF, 1),
    (0x1F300, 0x1FAFF, 4),
    (0x20000, 0x2FFFF, 1),
    (0x10000, 0x10FFFF, 1),
]


def random_char(rng):
    total = sum(w for _, _, w in RANDOM_RANGES)
    pick = rng.uniform(0, total)
    for lo, hi, w in RANDOM_RANGES:
        if pick < w:
            return chr(rng.randint(lo, hi))
        pick -= w
    return " "


def random_cases(rng, n):
    cases = []
    for _ in range(n):
        length = rng.randint(0, 40)
        cases.append("".join(random_char(rng) for _ in range(length)))
    return cases


def story_lines(path, n, rng):
    """n distinct non-empty lines (story separators dropped), spread over the file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    keep = [l for l in lines if l.strip() and l != "<|endoftext|>" and len(l) <= MAX_LINE]
    keep = list(dict.fromkeys(keep))
    picked = sorted(rng.sample(range(len(keep)), n))
    return [keep[i] for i in picked]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("MODRUN_SHARED_DATA", "../shared/data"))
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    model = os.path.join(args.data, "vocab/llama_tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=model)
    rng = random.Random(SEED)

    sources = [
        ("v1", story_lines(os.path.join(args.data, "tinystories/TinyStories-train.head-2MiB.txt"), N_V1, rng)),
        ("v2", story_lines(os.path.join(args.data, "tinystories/TinyStoriesV2-GPT4-train.head-1727stories.txt"), N_V2, rng)),
        ("hand", HAND_CASES),
        ("long", long_cases(rng)),
        ("random", random_cases(rng, N_RANDOM)),
    ]
    cases = []
    for src, texts in sources:
        for text in texts:
            ids = sp.encode(text)
            case = {"src": src, "text": text, "ids": " ".join(map(str, ids))}
            decoded = sp.decode(ids)
            if decoded != text:
                case["decoded"] = decoded
            cases.append(case)

    doc = {
        "format": FORMAT,
        "command": "/usr/bin/python3 scripts/gen_tokenizer_fixture.py",
        "sentencepiece_version": spm.__version__,
        "model": "vocab/llama_tokenizer.model",
        "model_sha256": sha256(model),
        "encode": "SentencePieceProcessor.encode(text): no BOS, no EOS",
        "decode": "SentencePieceProcessor.decode(ids)",
        "seed": SEED,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out} ({os.path.getsize(args.out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
