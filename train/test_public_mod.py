"""The public MoD layouts' PyTorch forward passes (public_mod.py) and their
committed fixtures (testdata/convert/*/golden.json, public_fixtures.py)."""

import base64
import glob
import json
import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modllama import ModelConfig  # noqa: E402
from public_mod import (MoDLlama2, WrappedLlama, hf_from_meta_rows, llama2_ffn_dim,  # noqa: E402
                        meta_from_hf_rows)

torch.set_num_threads(1)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = sorted(glob.glob(os.path.join(ROOT, "testdata", "convert", "*", "golden.json")))


def arr(x):
    return np.frombuffer(base64.b64decode(x["f32"]), "<f4").reshape(x["shape"])


def load_json(path):
    with open(path) as fh:
        return json.load(fh)


def tiny(**kw):
    c = dict(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=40, ffn_dim=24, norm_eps=1e-5,
             rope_base=10000.0, max_seq_len=64, routed_layers=[])
    c.update(kw)
    return ModelConfig(**c)


def model_of(golden_path):
    """The PyTorch model of a committed fixture, built from its config file
    and loaded from its checkpoint."""
    d = os.path.dirname(golden_path)
    g = load_json(golden_path)
    cfg = load_json(os.path.join(d, g["config"]))
    ck = os.path.join(d, g["checkpoint"])
    if ck.endswith(".safetensors"):
        with open(ck, "rb") as fh:
            raw = fh.read()
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(raw[8:8 + n])
        sd = {k: torch.from_numpy(np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                                "<f4").reshape(v["shape"]).copy()) for k, v in hdr.items()}
    else:
        sd = torch.load(ck)
    if g["layout"] in ("mod-llama2", "meta-llama"):
        m = MoDLlama2(dict(cfg, routing=int("router.weight" in sd)))
    elif "hidden_size" in cfg:
        c = tiny(dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"], n_heads=cfg["num_attention_heads"],
                 n_kv_heads=cfg["num_key_value_heads"], vocab_size=cfg["vocab_size"], ffn_dim=cfg["intermediate_size"],
                 norm_eps=cfg["rms_norm_eps"], rope_base=cfg["rope_theta"])
        wrapped = sorted({int(k.split(".")[2]) for k in sd if "router_mlp" in k})
        m = WrappedLlama(c, "hf", wrapped, cfg.get("capacity", 0.125), cfg["tie_word_embeddings"])
    else:
        c = tiny(dim=cfg["dim"], n_layers=cfg["n_layers"], n_heads=cfg["n_heads"], n_kv_heads=cfg["n_kv_heads"],
                 vocab_size=cfg["vocab_size"], ffn_dim=llama2_ffn_dim(cfg["dim"], cfg["multiple_of"]), norm_eps=cfg["norm_eps"])
        wrapped = sorted({int(k.split(".")[1]) for k in sd if "router_mlp" in k})
        m = WrappedLlama(c, "meta", wrapped, cfg["capacity"])
    m.load_state_dict(sd, strict=True)
    return m.eval(), g


class TestPublicMoD(unittest.TestCase):
    def test_hf_rows_round_trip(self):
        w = torch.randn(24, 16)
        self.assertTrue(torch.equal(meta_from_hf_rows(hf_from_meta_rows(w, 3), 3), w))
        self.assertFalse(torch.equal(hf_from_meta_rows(w, 3), w))

    @torch.no_grad()
    def test_hf_llama_equals_its_meta_twin(self):
        """HF's rotate-half RoPE on permuted q/k rows is Meta's interleaved
        RoPE on the original rows: the same logits."""
        cfg = tiny()
        meta = WrappedLlama(cfg, "meta", []).init_weights(3)
        hf = WrappedLlama(cfg, "hf", [])
        sd = {}
        for k, v in meta.state_dict().items():
            k2 = (k.replace("tok_embeddings", "model.embed_tokens").replace("layers.", "model.layers.")
                  .replace("attention.wq", "self_attn.q_proj").replace("attention.wk", "self_attn.k_proj")
                  .replace("attention.wv", "self_attn.v_proj").replace("attention.wo", "self_attn.o_proj")
                  .replace("feed_forward.w1", "mlp.gate_proj").replace("feed_forward.w3", "mlp.up_proj")
                  .replace("feed_forward.w2", "mlp.down_proj").replace("attention_norm", "input_layernorm")
                  .replace("ffn_norm", "post_attention_layernorm").replace("output.", "lm_head."))
            if k2 == "norm.weight":
                k2 = "model.norm.weight"
            if "q_proj" in k2:
                v = hf_from_meta_rows(v, cfg.n_heads)
            elif "k_proj" in k2:
                v = hf_from_meta_rows(v, cfg.n_kv_heads)
            sd[k2] = v
        hf.load_state_dict(sd, strict=True)
        t = torch.randint(0, 40, (1, 11))
        np.testing.assert_allclose(hf(t)["logits"].numpy(), meta(t)["logits"].numpy(), atol=1e-5)

    def test_modllama2_names(self):
        """One shared router (and aux router), saved at the top and under
        every block; Llama 2's FFN width rule."""
        p = dict(dim=16, n_layers=3, n_heads=4, vocab_size=40, multiple_of=8, norm_eps=1e-5, capacity=4,
                 routing=1, aux_routing=1, router_skip_blocks=2)
        sd = MoDLlama2(p).state_dict()
        for pre in ["", "layers.0.", "layers.1.", "layers.2."]:
            for n in ["router.weight", "aux_router.0.weight", "aux_router.2.weight"]:
                self.assertIn(pre + n, sd)
        self.assertEqual(list(sd["layers.0.feed_forward.w1.weight"].shape), [48, 16])  # int(128/3)=42 -> 48
        self.assertEqual(llama2_ffn_dim(32, 16, 1.3), 112)

    @torch.no_grad()
    def test_wrapper_with_gate_one_and_every_token_is_the_plain_model(self):
        """Every token selected (capacity 1) and r = 1: the wrapped block's
        output, residual included, times 1, at compact positions = original."""
        cfg = tiny()
        plain = WrappedLlama(cfg, "meta", []).init_weights(4)
        wrapped = WrappedLlama(cfg, "meta", [1], capacity=1.0)
        sd = {k.replace("layers.1.", "layers.1.transformer_block."): v for k, v in plain.state_dict().items()}
        sd.update({"layers.1.router_mlp.weight": torch.zeros(1, 16), "layers.1.router_mlp.bias": torch.ones(1),
                   "layers.1.aux_mlp.weight": torch.zeros(1, 16), "layers.1.aux_mlp.bias": torch.ones(1)})
        wrapped.load_state_dict(sd, strict=True)
        t = torch.randint(0, 40, (1, 9))
        for mode in ["eval", "predictor"]:
            np.testing.assert_allclose(wrapped(t, mode)["logits"].numpy(), plain(t)["logits"].numpy(), atol=1e-6)

    @torch.no_grad()
    def test_modllama2_selects_min_of_n_and_capacity_by_sigmoid(self):
        p = dict(dim=16, n_layers=2, n_heads=4, vocab_size=40, multiple_of=8, norm_eps=1e-5, capacity=3, routing=1)
        m = MoDLlama2(p).init_weights(1)
        t = torch.randint(0, 40, (1, 10))
        lay = m(t)["layers"][0]
        r = lay["router_logits"]
        self.assertEqual(lay["selected"].tolist(), sorted(torch.topk(r, 3).indices.tolist()))
        self.assertEqual(len(m(t[:, :2])["layers"][0]["selected"]), 2)
        self.assertEqual(m(t, "router")["layers"][0]["selected"].tolist(), torch.nonzero(r > 0).flatten().tolist())

    def test_committed_fixtures_reproduce(self):
        """Each committed checkpoint, run here, gives its golden.json: a
        fixture regenerated from other weights or code fails."""
        self.assertGreaterEqual(len(GOLDEN), 6, "testdata/convert/*/golden.json")
        for path in GOLDEN:
            with self.subTest(path=os.path.relpath(path, ROOT)), torch.no_grad():
                m, g = model_of(path)
                t = torch.tensor([g["tokens"]])
                for c in g["cases"]:
                    o = m(t, "eval" if c["mode"] == "eval" else c["routing"])
                    np.testing.assert_allclose(o["logits"][0].numpy(), arr(c["logits"]), atol=1e-5, err_msg=c["name"])
                    for lay, want in zip(o["layers"], c["layers"]):
                        self.assertEqual(lay["selected"].tolist(), want["selected"], (c["name"], want["layer"]))


if __name__ == "__main__":
    unittest.main()
