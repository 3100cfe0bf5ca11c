"""The committed fixtures (testdata/mod) agree with the PyTorch reference:
each GGUF, read back and run here, reproduces its fixture JSON. This catches a
fixture regenerated from the wrong weights and a converter that writes
something other than what was trained."""

import base64
import glob
import json
import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
from gguf_io import GGUFFile  # noqa: E402
from modllama import model_from_gguf  # noqa: E402

torch.set_num_threads(1)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = sorted(glob.glob(os.path.join(ROOT, "testdata", "mod", "*.fixture.json")))


def arr(x):
    return np.frombuffer(base64.b64decode(x["f32"]), "<f4").reshape(x["shape"])


class TestFixtures(unittest.TestCase):
    def test_fixtures_reproduce(self):
        self.assertGreaterEqual(len(FIXTURES), 4, "testdata/mod fixtures missing: run scripts/gen_mod_fixtures.sh")
        for path in FIXTURES:
            with self.subTest(fixture=os.path.basename(path)):
                with open(path) as fh:
                    doc = json.load(fh)
                self.assertEqual(doc["format"], fixtures.FORMAT)
                m = model_from_gguf(GGUFFile(os.path.join(os.path.dirname(path), doc["model"]))).eval()
                names = [c["name"] for c in doc["cases"]]
                self.assertEqual(names[0], "eval")
                got = {c["name"]: c for c in fixtures.cases_for(m, doc["cases"][0]["tokens"])}
                self.assertEqual(sorted(got), sorted(names))
                for want in doc["cases"]:
                    g = got[want["name"]]
                    self.assertEqual(g["tokens"], want["tokens"], want["name"])
                    np.testing.assert_allclose(arr(g["logits"]), arr(want["logits"]), rtol=0, atol=2e-5)
                    np.testing.assert_allclose(arr(g["hidden"]), arr(want["hidden"]), rtol=0, atol=2e-5)
                    for gl, wl in zip(g["layers"], want["layers"], strict=True):
                        self.assertEqual(gl["selected"], wl["selected"], f"{want['name']} layer {wl['layer']}")
                        # |r| reaches ~3.5: 1e-5 is a few float32 ulps of a 64-long dot
                        # product, whose summation order BLAS may change between runs
                        # (1.7e-6 seen on a loaded machine); the same bound as Go's.
                        np.testing.assert_allclose(arr(gl["router_logits"]), arr(wl["router_logits"]), rtol=0, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
