"""A SentencePiece vocabulary trained by spm_vocab.py, written as GGUF, gives
the same ids under `modrun tokenize` (Go) as under sentencepiece itself, and
decodes back to the text. Lines used for the check come from the validation
file; the vocabulary is trained on ~200 KB of a train file.

  /usr/bin/python3 -m unittest discover -s train -p 'test_*.py'
"""

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402
from gguf_io import GGUFFile  # noqa: E402

try:
    import sentencepiece as spm
    import spm_vocab
except ImportError:
    spm = None

VOCAB_SIZE = 400  # the smallest round size above 259 specials+bytes plus ~60 required chars
TRAIN_BYTES = 200_000
N_LINES = 200
# Cases the stories lack: runs of spaces, leading/trailing space, digits, a
# tab, and characters below the coverage (byte fallback, 4-byte UTF-8).
EXTRA = ["  two  spaces and a trailing one ", " leading", "year 2024: 3.14159", "tab\there",
         "naïve café — “quotes” 🙂 日本"]


GO = shutil.which("go") or next((p for p in ["/usr/local/go/bin/go"] if os.path.exists(p)), None)


def have(*paths):
    return all(os.path.exists(p) for p in paths)


@unittest.skipUnless(spm, "needs Debian's python3-sentencepiece")
@unittest.skipUnless(have(train.TRAIN_FILES[0], train.VAL_FILE),
                     f"needs TinyStories in {os.path.dirname(train.VAL_FILE)}")
@unittest.skipUnless(GO, "needs the go toolchain to build modrun")
class TestSPMVocab(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="modrun-spm-test-")
        cls.modrun = os.path.join(cls.tmp, "modrun")
        subprocess.run([GO, "build", "-o", cls.modrun, "./cmd/modrun"], cwd=train.ROOT, check=True)
        opts = spm_vocab.settings(VOCAB_SIZE)
        cls.gguf = spm_vocab.build(train.TRAIN_FILES[:1], os.path.join(cls.tmp, "vocab"), opts, TRAIN_BYTES)
        cls.sp = spm.SentencePieceProcessor(model_file=os.path.join(cls.tmp, "vocab", "spm.model"))
        with open(train.VAL_FILE, encoding="utf-8") as fh:
            lines = [ln.rstrip("\n") for ln in fh if ln.strip()]
        cls.lines = lines[:N_LINES] + EXTRA

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def go(self, *args, stdin):
        r = subprocess.run([self.modrun, "tokenize", "-m", self.gguf, *args], input=stdin.encode(),
                           capture_output=True, check=False)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return r.stdout

    def go_encode(self, text):
        return [int(t) for t in self.go(stdin=text).split()]

    def go_decode(self, ids):
        return self.go("--decode", stdin=" ".join(map(str, ids))).decode("utf-8")

    def test_gguf_form(self):
        g = GGUFFile(self.gguf)
        toks, types = g.kv["tokenizer.ggml.tokens"], list(g.kv["tokenizer.ggml.token_type"])
        self.assertEqual(len(toks), VOCAB_SIZE)
        self.assertEqual(toks[:3], ["<unk>", "<s>", "</s>"])
        self.assertEqual(types[:3], [2, 3, 3])
        self.assertEqual(toks[3:259], [f"<0x{b:02X}>" for b in range(256)])
        self.assertEqual(set(types[3:259]), {6})
        self.assertEqual(set(types[259:]), {1})
        self.assertIn("\u2581the", toks)
        self.assertEqual(g.kv["tokenizer.ggml.model"], "llama")
        self.assertEqual((g.kv["tokenizer.ggml.bos_token_id"], g.kv["tokenizer.ggml.eos_token_id"],
                          g.kv["tokenizer.ggml.unknown_token_id"]), (1, 2, 0))
        self.assertIs(g.kv["tokenizer.ggml.add_bos_token"], True)
        self.assertEqual(list(g.kv["tokenizer.ggml.scores"]), [self.sp.get_score(i) for i in range(VOCAB_SIZE)])

    def test_go_encodes_like_sentencepiece(self):
        with ThreadPoolExecutor(4) as ex:
            got = list(ex.map(self.go_encode, self.lines))
        bad = [(ln, g, self.sp.encode(ln)) for ln, g in zip(self.lines, got) if g != self.sp.encode(ln)]
        self.assertEqual(bad, [], f"{len(bad)} of {len(self.lines)} lines differ; first: {bad[:1]}")
        # As train.py tokenizes: one multi-line text, BOS first; newlines become byte tokens.
        text = "\n".join(self.lines)
        self.assertEqual([int(t) for t in self.go("--bos", stdin=text).split()], [1] + self.sp.encode(text))

    def test_decode_round_trips(self):
        text = "\n".join(self.lines)
        ids = self.sp.encode(text)
        self.assertEqual(self.sp.decode(ids), text)
        self.assertEqual(self.go_decode(ids), text)

    def test_trainer_option_trains_once_then_reuses(self):
        small = os.path.join(self.tmp, "train-small.txt")
        with open(small, "w", encoding="utf-8") as fh:
            fh.write("\n".join(spm_vocab.training_lines(train.TRAIN_FILES[:1], TRAIN_BYTES)) + "\n")
        argv = ["--out", os.path.join(self.tmp, "run"), "--spm-vocab", str(VOCAB_SIZE),
                "--train-files", small, "--cache", os.path.join(self.tmp, "cache")]
        a = train.parser().parse_args(argv)
        with contextlib.redirect_stdout(io.StringIO()):  # its "trained ..." line
            gguf = train.resolve_vocab(a)
        self.assertEqual(a.vocab_size, VOCAB_SIZE)
        self.assertEqual(train.resolve_vocab(a), gguf)  # idempotent: train() resolves again
        mtime = os.stat(gguf).st_mtime_ns
        b = train.parser().parse_args(argv)
        self.assertEqual(train.resolve_vocab(b), gguf)
        self.assertEqual(os.stat(gguf).st_mtime_ns, mtime, "the cached vocabulary was rebuilt")
        with open(gguf, "rb") as f1, open(self.gguf, "rb") as f2:
            self.assertEqual(f1.read(), f2.read(), "same text and settings gave a different vocabulary")
        with self.assertRaisesRegex(ValueError, "validation file"):
            train.resolve_vocab(train.parser().parse_args(argv[:4] + ["--train-files", train.VAL_FILE]))

    def test_cache_key_follows_settings(self):
        files = train.TRAIN_FILES[:1]
        k = spm_vocab.cache_key(files, spm_vocab.settings(VOCAB_SIZE))
        self.assertEqual(k, spm_vocab.cache_key(files, spm_vocab.settings(VOCAB_SIZE)))
        self.assertNotEqual(k, spm_vocab.cache_key(files, spm_vocab.settings(VOCAB_SIZE + 1)))
        self.assertNotEqual(k, spm_vocab.cache_key(files, spm_vocab.settings(VOCAB_SIZE), TRAIN_BYTES))


if __name__ == "__main__":
    unittest.main()
