"""What a newcomer meets running train.py (issue 45): a file's stories are
tokenized by one modrun process, each story on its own exactly as a process
a story did, cached where the help says; Ctrl-C ends without a traceback.

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
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

GO = shutil.which("go") or next((p for p in ["/usr/local/go/bin/go"] if os.path.exists(p)), None)
STORIES = ["Once upon a time there was a cat.", "The dog ran to the park.\nIt was happy.", "Lily saw a bird."]


@unittest.skipUnless(GO, "needs the go toolchain to build modrun")
class TestTokenizeFile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="modrun-train-cli-")
        cls.modrun = os.path.join(cls.tmp, "modrun")
        subprocess.run([GO, "build", "-o", cls.modrun, "./cmd/modrun"], cwd=train.ROOT, check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_one_process_a_file_and_the_cache(self):
        text = os.path.join(self.tmp, "stories.txt")
        with open(text, "w", encoding="utf-8") as fh:
            fh.write("\n<|endoftext|>\n".join(STORIES))
        want = []
        for s in STORIES:  # a process a story, as before
            r = subprocess.run([self.modrun, "tokenize", "-m", train.VOCAB, "--bos"], input=s.encode(),
                               capture_output=True, check=True)
            want += [int(t) for t in r.stdout.split()]
        cache = os.path.join(self.tmp, "cache")
        calls = []
        real = subprocess.run

        def counting(*a, **k):
            calls.append(a[0])
            return real(*a, **k)

        with mock.patch.object(train.subprocess, "run", counting), contextlib.redirect_stdout(io.StringIO()):
            got = train.tokenize_file(text, train.VOCAB, self.modrun, cache)
            self.assertEqual(len(calls), 1, "one modrun process for the file")
            self.assertEqual(got.tolist(), want)
            again = train.tokenize_file(text, train.VOCAB, self.modrun, cache)
        self.assertEqual(len(calls), 1, "the second time comes from the cache")
        self.assertEqual(again.tolist(), want)
        self.assertEqual(len(os.listdir(cache)), 1)
        self.assertIn("--cache", train.__doc__)
        self.assertIn("~/.cache/modrun/train", train.__doc__)
        self.assertEqual(train.parser().parse_args(["--out", "x"]).cache,
                         os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "modrun", "train"))


class TestInterrupt(unittest.TestCase):
    def test_ctrl_c_exits_130_without_a_traceback(self):
        err = io.StringIO()
        with mock.patch.object(train, "run", side_effect=KeyboardInterrupt), contextlib.redirect_stderr(err):
            with self.assertRaises(SystemExit) as cm:
                train.main(["--out", "x"])
        self.assertEqual(cm.exception.code, 130)
        self.assertEqual(err.getvalue(), "\ntrain.py: interrupted\n")


if __name__ == "__main__":
    unittest.main()
