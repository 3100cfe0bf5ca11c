"""Tests of the PyTorch MoD reference (run from the repository root):

    /usr/bin/python3 -m unittest discover -s train -p 'test_*.py'
"""

import json
import math
import os
import sys
import shutil
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as trainer  # noqa: E402
from gguf_io import GGUFFile  # noqa: E402
from modllama import (MoDLlama, ModelConfig, capacity_k, config_from_gguf, grow_interleaved,  # noqa: E402
                      load_dense_gguf, model_from_gguf)

torch.set_num_threads(1)  # tiny tensors: more threads only add contention

SHARED = trainer.DATA


def tiny_model(dtype=torch.float32, seed=0, **kw):
    """A small random MoD model whose router logits are well away from 0 and
    from each other (so small perturbations never flip a routing decision)."""
    args = dict(dim=16, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=64, ffn_dim=24,
                routed_layers=[1, 2], capacity=0.25, router_bias=True, tied_output=False)
    args.update(kw)
    m = MoDLlama(ModelConfig(**args)).init_weights(seed=seed, std=0.3, router_std=2.0)
    return m.to(dtype)


def rot(v, p, base):
    """Interleaved-pairs RoPE of one head vector, written out pair by pair."""
    out = v.clone()
    hd = v.shape[0]
    for i in range(hd // 2):
        th = p * base ** (-2 * i / hd)
        c, s = math.cos(th), math.sin(th)
        out[2 * i] = v[2 * i] * c - v[2 * i + 1] * s
        out[2 * i + 1] = v[2 * i] * s + v[2 * i + 1] * c
    return out


def naive_routed_block(blk, x):
    """DESIGN.md §3 for one sequence, token by token, with Python loops:
    top-k by sorting (-r, position), then each selected token attends to the
    selected tokens at or before its position."""
    c = blk.cfg
    S, D = x.shape
    r = [float(x[i] @ blk.mod_router.weight + (blk.mod_router.bias[0] if blk.mod_router.bias is not None else 0))
         for i in range(S)]
    k = max(1, math.ceil(float(np.float32(c.capacity)) * S))
    sel = sorted(sorted(range(S), key=lambda i: (-r[i], i))[:k])
    a = blk.attention
    hd, rep = c.head_dim, c.n_heads // c.n_kv_heads
    xn = {i: blk.attention_norm(x[i]) for i in sel}
    q = {i: (a.wq.weight @ xn[i]).view(c.n_heads, hd) for i in sel}
    kk = {i: (a.wk.weight @ xn[i]).view(c.n_kv_heads, hd) for i in sel}
    vv = {i: (a.wv.weight @ xn[i]).view(c.n_kv_heads, hd) for i in sel}
    out = x.clone()
    for i in sel:
        heads = []
        for h in range(c.n_heads):
            qi = rot(q[i][h], i, c.rope_base)
            js = [j for j in sel if j <= i]
            sc = torch.stack([qi @ rot(kk[j][h // rep], j, c.rope_base) for j in js]) / math.sqrt(hd)
            w = torch.softmax(sc, 0)
            heads.append(sum(w[n] * vv[j][h // rep] for n, j in enumerate(js)))
        att = a.wo.weight @ torch.cat(heads)
        hmid = x[i] + att
        ff = blk.feed_forward
        n2 = blk.ffn_norm(hmid)
        mlp = ff.w2.weight @ (torch.nn.functional.silu(ff.w1.weight @ n2) * (ff.w3.weight @ n2))
        g = 1 / (1 + math.exp(-r[i])) if c.gate == "sigmoid" else r[i]
        out[i] = x[i] + g * (att + mlp)
    return out, sel


class TestRouting(unittest.TestCase):
    def test_capacity_k(self):
        self.assertEqual(capacity_k(0.125, 37), 5)
        self.assertEqual(capacity_k(0.125, 8), 1)
        self.assertEqual(capacity_k(0.125, 1), 1)
        self.assertEqual(capacity_k(0.5, 37), 19)
        # 0.3 as f32 is 0.30000001192..., and c*S is a rounding error above 3: k is 3, not 4.
        self.assertEqual(capacity_k(0.3, 10), 3)
        self.assertEqual(capacity_k(0.1, 10), 1)
        self.assertEqual(capacity_k(1.0, 37), 37)

    def test_topk_ties_go_to_lower_position(self):
        blk = tiny_model().layers[1]
        r = torch.tensor([[0.5, 2.0, 0.5, 2.0, 0.5, 0.5, 2.0, 0.5, 0.5, 0.5]])
        # capacity 0.25 of 10 -> k = 3; the three 2.0s win.
        self.assertEqual(blk.topk_select(r).tolist(), [[1, 3, 6]])
        r = torch.tensor([[1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]])
        self.assertEqual(blk.topk_select(r).tolist(), [[0, 1, 2]])

    def test_static_topk_equals_naive_loop(self):
        for gate in ("sigmoid", "identity"):
            m = tiny_model(torch.float64, gate=gate)
            torch.manual_seed(1)
            x = torch.randn(2, 13, 16, dtype=torch.float64)
            pos = torch.arange(13).expand(2, 13)
            for blk in (m.layers[1], m.layers[2]):
                got = blk.forward_topk(x, pos)
                for b in range(2):
                    want, sel = naive_routed_block(blk, x[b])
                    self.assertEqual(len(sel), 4)
                    torch.testing.assert_close(got[b], want, rtol=1e-10, atol=1e-10,
                                               msg=f"gate {gate} layer {blk.layer} batch {b}")

    def test_gradcheck_routed_block(self):
        m = tiny_model(torch.float64)
        blk = m.layers[1]
        torch.manual_seed(2)
        x = torch.randn(1, 7, 16, dtype=torch.float64, requires_grad=True)
        pos = torch.arange(7)[None]
        r = blk.mod_router(x)[0].detach()
        gaps = (r[:, None] - r[None, :]).abs() + torch.eye(7, dtype=torch.float64) * 1e9
        self.assertGreater(float(gaps.min()), 1e-3, "router logits too close: gradcheck would cross a routing change")
        w = blk.mod_router.weight.detach().clone().requires_grad_()
        bias = blk.mod_router.bias.detach().clone().requires_grad_()

        class FnRouter(torch.nn.Module):  # the router as a function of (w, b) inputs
            def forward(self, x):
                return x @ self.w + self.b

        router, fr = blk.mod_router, FnRouter()
        blk.mod_router = fr

        def f(x, w, b):
            fr.w, fr.b = w, b
            return blk.forward_topk(x, pos)

        try:
            # x reaches the output through the residual, attention and MLP of
            # the selected rows (gather/scatter); w and b through g(r).
            self.assertTrue(torch.autograd.gradcheck(f, (x, w, bias), eps=1e-6, atol=1e-6))
        finally:
            blk.mod_router = router


class TestGenerate(unittest.TestCase):
    def check_splits(self, m, routing):
        torch.manual_seed(3)
        toks = torch.randint(0, 64, (1, 19))
        with torch.no_grad():
            full = m.forward_causal(toks, routing)
            for splits in ([1] * 19, [5, 1, 1, 7, 5]):
                cache, pos, logits, sel = m.new_cache(), 0, [], {}
                for n in splits:
                    out = m.forward_causal(toks[:, pos:pos + n], routing, cache, pos)
                    logits.append(out["logits"])
                    for t in out["layers"]:
                        sel.setdefault(t["layer"], []).extend(t["selected"][0].tolist())
                    pos += n
                torch.testing.assert_close(torch.cat(logits, 1), full["logits"], rtol=1e-5, atol=1e-5)
                for t in full["layers"]:
                    s = t["selected"][0].tolist()
                    self.assertEqual(sel[t["layer"]], s)
                    self.assertTrue(0 < len(s) < 19, f"layer {t['layer']}: {len(s)} of 19 selected: test is vacuous")
                    # compact cache: only the selected tokens have KV entries
                    self.assertEqual(cache[t["layer"]]["pos"][0].tolist(), s)
                self.assertEqual(cache[0]["pos"].shape[1], 19)

    def test_full_forward_equals_incremental_decode_router(self):
        self.check_splits(tiny_model(predictor_hidden=8), "router")

    def test_full_forward_equals_incremental_decode_predictor(self):
        m = tiny_model(predictor_hidden=8)
        with torch.no_grad():  # predictor logits well spread
            for i in (1, 2):
                m.layers[i].mod_pred_down.weight.mul_(20)
        self.check_splits(m, "predictor")

    def test_unselected_tokens_pass_through(self):
        m = tiny_model()
        with torch.no_grad():
            m.layers[1].mod_router.bias.fill_(-1e6)  # nothing selected in causal mode
        toks = torch.randint(0, 64, (1, 9))
        cache = m.new_cache()
        with torch.no_grad():
            out = m.forward_causal(toks, "router", cache)
        self.assertEqual(out["layers"][0]["selected"].numel(), 0)
        self.assertIsNone(cache[1]["k"])


class TestStories260K(unittest.TestCase):
    def test_dense_greedy_matches_llama2c(self):
        path = os.path.join(SHARED, "models", "stories260K.gguf")
        want_path = os.path.join(SHARED, "models", "stories260K_greedy200_ids.json")
        if not (os.path.exists(path) and os.path.exists(want_path)):
            self.skipTest(f"shared data absent: {path}")
        g = GGUFFile(path)
        m = load_dense_gguf(MoDLlama(config_from_gguf(g, routed_layers=[])), g).eval()
        with open(want_path) as fh:
            want = json.load(fh)["greedy_token_ids"][:60]
        toks, _ = m.generate_greedy([1], len(want))
        self.assertEqual(toks[1:], want)

    def test_retrofit_runs_with_routers(self):
        path = os.path.join(SHARED, "models", "stories260K.gguf")
        if not os.path.exists(path):
            self.skipTest(f"shared data absent: {path}")
        g = GGUFFile(path)
        m = load_dense_gguf(MoDLlama(config_from_gguf(g)).init_weights(), g)
        self.assertEqual(m.cfg.routed_layers, [1, 3])
        out = m(torch.randint(0, 512, (2, 37)), torch.randint(0, 512, (2, 37)))
        self.assertEqual(out["layers"][0]["selected"].shape, (2, 5))
        self.assertTrue(torch.isfinite(out["loss"]))

    def test_grow_interleaved_starts_as_the_dense_model(self):
        path = os.path.join(SHARED, "models", "stories260K.gguf")
        if not os.path.exists(path):
            self.skipTest(f"shared data absent: {path}")
        g = GGUFFile(path)
        base = model_from_gguf(g).eval()
        m = grow_interleaved(MoDLlama(config_from_gguf(g, n_layers=9, predictor_hidden=32)).init_weights(seed=3), g)
        self.assertEqual(m.cfg.routed_layers, [1, 3, 5, 7])
        x = torch.randint(0, 512, (2, 70), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            want, got = base(x)["logits"], m.eval()(x)["logits"]
        self.assertEqual(float((want - got).abs().max()), 0.0)
        # ... and the new blocks are real: a nonzero output projection changes the logits.
        with torch.no_grad():
            m.layers[1].attention.wo.weight.normal_(0, 0.1)
            self.assertGreater(float((m(x)["logits"] - want).abs().max()), 1e-3)
        with self.assertRaisesRegex(ValueError, "grow into 9 layers"):
            grow_interleaved(MoDLlama(config_from_gguf(g, n_layers=7)), g)


def counting_ids(d):
    """Synthetic data with structure to learn: BOS then counting runs mod 50."""
    rng = np.random.default_rng(0)
    seqs = []
    for _ in range(400):
        start, step = rng.integers(3, 50), rng.integers(1, 4)
        seqs += [1] + [3 + (start + step * i) % 50 for i in range(30)]
    ids = os.path.join(d, "ids.bin")
    np.array(seqs, dtype="<u2").tofile(ids)
    return ids


def tiny_args(d, ids, *extra):
    return trainer.parser().parse_args([
        "--out", d, "--train-ids", ids, "--val-ids", ids, "--batch", "8",
        "--seq-len", "24", "--dim", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2",
        "--ffn", "48", "--vocab-size", "64", "--lr", "1e-2", "--warmup", "5",
        "--val-windows", "8", "--threads", "1", "--router-bias", "--device", "cpu", *extra])


class TestTraining(unittest.TestCase):
    def test_smoke_30_steps_loss_falls(self):
        with tempfile.TemporaryDirectory() as d:
            a = tiny_args(d, counting_ids(d), "--steps", "30", "--eval-every", "0")
            _, recs = trainer.train(a, log=lambda s: None)
            first = np.mean([r["lm_loss"] for r in recs[:5]])
            last = np.mean([r["lm_loss"] for r in recs[-5:]])
            self.assertLess(last, first - 0.5, f"loss {first:.3f} -> {last:.3f}")
            self.assertTrue(os.path.exists(os.path.join(d, "ckpt.pt")))
            with open(os.path.join(d, "config.json")) as fh:
                cfg = ModelConfig.from_json(fh.read())
            self.assertEqual(cfg.routed_layers, [1])
            sd = torch.load(os.path.join(d, "ckpt.pt"))
            self.assertIn("layers.1.mod_router.weight", sd)
            self.assertIn("layers.1.mod_pred_up.weight", sd)
            self.assertNotIn("layers.0.mod_router.weight", sd)

    def test_resume_continues_the_same_run(self):
        # 20 steps in one go, and 10 + (stop) + 10 with --resume, give the same weights.
        with tempfile.TemporaryDirectory() as d:
            ids = counting_ids(d)
            one, two = os.path.join(d, "one"), os.path.join(d, "two")
            m1, r1 = trainer.train(tiny_args(one, ids, "--steps", "20", "--eval-every", "10"), log=lambda s: None)
            trainer.train(tiny_args(two, ids, "--steps", "10", "--eval-every", "10"), log=lambda s: None)
            # the stopped run's schedule was for 10 steps; resuming with --steps 20 must
            # replay the same data and optimiser state, so give both the 20-step schedule:
            shutil.rmtree(two)
            trainer.train(tiny_args(two, ids, "--steps", "20", "--eval-every", "10", "--stop-after", "10"),
                          log=lambda s: None)
            msgs = []
            m2, r2 = trainer.train(tiny_args(two, ids, "--steps", "20", "--eval-every", "10", "--resume"),
                                   log=msgs.append)
            self.assertIn(f"resumed {two} at step 10", msgs)
            self.assertEqual([r["step"] for r in r2], list(range(10, 20)))
            for (k, v1), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
                self.assertTrue(torch.allclose(v1, v2, atol=1e-6), k)
            with open(os.path.join(two, "log.jsonl")) as fh:
                self.assertEqual([json.loads(l)["step"] for l in fh], list(range(20)))

    def test_distill_moves_towards_the_teacher(self):
        # A student distilled from a teacher (here a run folder) ends closer to it
        # than the same student trained on the data alone.
        with tempfile.TemporaryDirectory() as d:
            ids = counting_ids(d)
            tg = os.path.join(d, "t")
            teacher, _ = trainer.train(tiny_args(tg, ids, "--steps", "40", "--eval-every", "0",
                                                 "--routed", "dense", "--predictor-hidden", "0"), log=lambda s: None)
            x = torch.randint(3, 53, (4, 24), generator=torch.Generator().manual_seed(1))

            def kl_to_teacher(*extra):
                m, recs = trainer.train(tiny_args(os.path.join(d, "s" + str(len(extra))), ids, "--steps", "40",
                                                  "--eval-every", "0", "--routed", "dense",
                                                  "--predictor-hidden", "0", "--seed", "7", *extra),
                                        log=lambda s: None)
                with torch.no_grad():
                    return float(trainer.distill_loss(m.eval()(x)["logits"], teacher.eval()(x)["logits"])), recs

            plain, _ = kl_to_teacher()
            distilled, recs = kl_to_teacher("--teacher", tg, "--distill", "1")
            self.assertIn("kl", recs[0])
            self.assertLess(distilled, 0.5 * plain, f"KL to teacher: distilled {distilled:.4f}, plain {plain:.4f}")


if __name__ == "__main__":
    unittest.main()
