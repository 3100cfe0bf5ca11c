#!/usr/bin/python3
"""Write the golden fixtures the Go code is checked against.

testdata/mod/NAME.gguf + NAME.fixture.json (format modrun-mod-fixture/1):
fixed small models (random init and briefly trained, dense and MoD, GQA) with
logits, final hidden states (after output_norm), router logits, routing
decisions and predictor logits, in eval (top-k) and generate (causal) modes,
and a greedy continuation decoded with the compact KV cache.

testdata/convert/: tiny checkpoints for the convert tests (a MoD .pt, a dense
.safetensors), their configs,
the tensors the converted GGUF must hold, and a 512-token vocab-only GGUF.

Run through scripts/gen_mod_fixtures.sh (it builds bin/modrun first).
"""

import argparse
import base64
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as trainer  # noqa: E402
from gguf_io import GGUFFile, write_vocab_gguf  # noqa: E402
from modllama import MoDLlama, ModelConfig, config_from_gguf, load_dense_gguf  # noqa: E402

FORMAT = "modrun-mod-fixture/1"
MADE_BY = "scripts/gen_mod_fixtures.sh (train/fixtures.py + bin/modrun convert)"
SEQ_LEN = 37  # not a power of two; top-k at c=0.125 routes ceil(4.625) = 5
PROMPT_LEN = 7
N_GREEDY = 16
TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
        "in the park with her friends. One day, she saw a big red ball under a tree.")


def f32(t):
    a = t.detach().cpu().numpy().astype("<f4")
    return {"shape": list(a.shape), "f32": base64.b64encode(a.tobytes()).decode()}


def tokens_of(text, vocab, modrun):
    r = subprocess.run([modrun, "tokenize", "-m", vocab, "--bos"], input=text.encode(),
                       capture_output=True, check=True)
    return [int(t) for t in r.stdout.split()]


# ---- the models ---------------------------------------------------------------

def spread_predictors(m, scale):
    with torch.no_grad():
        for blk in m.layers:
            if hasattr(blk, "mod_pred_down"):
                blk.mod_pred_down.weight.mul_(scale)


def random_models():
    """Random-init models. Weights are larger than a training init (std 0.08)
    so every part of the block changes the logits visibly; router weights are
    scaled so that almost every |r| > 1e-2 (routing is discrete: a test that
    compares decisions needs margins)."""
    common = dict(dim=64, n_heads=8, n_kv_heads=4, vocab_size=512, ffn_dim=172)
    specs = [
        ("dense-rand", ModelConfig(n_layers=2, routed_layers=[], tied_output=True, **common), 1, 0.0),
        ("mod-rand-sigmoid-pred", ModelConfig(n_layers=4, routed_layers=[1, 3], gate="sigmoid",
                                              predictor_hidden=32, tied_output=False, **common), 2, 1.0),
        ("mod-rand-identity-bias", ModelConfig(n_layers=3, routed_layers=[1, 2], gate="identity",
                                               router_bias=True, predictor_hidden=0, capacity=0.25,
                                               rope_base=5000.0, tied_output=True, **common), 3, 1.0),
    ]
    out = []
    for name, cfg, seed, router_std in specs:
        m = MoDLlama(cfg).init_weights(seed=seed, std=0.08, router_std=router_std)
        if cfg.router_bias:
            with torch.no_grad():
                for blk in m.layers:
                    if blk.routed:
                        blk.mod_router.bias.fill_(-0.15 * blk.layer)  # a visible, non-zero bias
        spread_predictors(m, 8.0)
        out.append((name, m))
    return out


def trained_model(a):
    """stories260K retrofitted with routers (sigmoid gate, predictor, bias,
    capacity 0.5 so that causal routing selects a fair share of tokens after
    a short run) and trained briefly on the TinyStories train files."""
    targs = trainer.parser().parse_args([
        "--init", a.vocab, "--vocab", a.vocab, "--modrun", a.modrun, "--routed", "1,3", "--router-bias",
        "--capacity", "0.5", "--steps", str(a.train_steps), "--batch", "8", "--seq-len", "128", "--lr", "2e-3", "--min-lr", "2e-4",
        "--warmup", "20", "--eval-every", "0", "--val-windows", "32", "--log-every", "50",
        "--aux-weight", "0.1", "--pred-weight", "0.1", "--router-std", "0.1", "--seed", "7",
        "--threads", str(a.threads)])
    m, recs = trainer.train(targs, log=lambda s: print("  mod-trained:", s, flush=True))
    return m, {"steps": a.train_steps, "final_lm_loss": recs[-1]["lm_loss"], "val_loss": recs[-1]["val_loss"]}


# ---- checkpoints and conversion -------------------------------------------------

def save_checkpoint(m, d, stem):
    os.makedirs(d, exist_ok=True)
    ck, cj = os.path.join(d, stem + ".pt"), os.path.join(d, stem + ".config.json")
    torch.save({k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}, ck)
    with open(cj, "w") as fh:
        fh.write(m.cfg.to_json() + "\n")
    return ck, cj


def convert(a, ck, cj, out, vocab=None):
    cmd = [a.modrun, "convert", "-i", ck, "-c", cj, "--vocab", vocab or a.vocab, "-o", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


# ---- fixture cases -----------------------------------------------------------------

def layer_json(t, has_pred):
    d = {"layer": t["layer"], "router_logits": f32(t["router_logits"][0]),
         "selected": [int(i) for i in t["selected"][0].tolist()]}
    if has_pred:
        d["predictor_logits"] = f32(t["predictor_logits"][0])
    return d


@torch.no_grad()
def cases_for(m, tokens):
    has_pred = m.cfg.predictor_hidden > 0
    x = torch.tensor([tokens])
    ev = m(x)
    cases = [{"name": "eval", "mode": "eval", "tokens": tokens, "logits": f32(ev["logits"][0]),
              "hidden": f32(ev["hidden"][0]), "layers": [layer_json(t, has_pred) for t in ev["layers"]]}]
    if not m.cfg.routed_layers:
        return cases
    for routing in ["router"] + (["predictor"] if has_pred else []):
        g = m.forward_causal(x, routing)
        cases.append({"name": f"generate-{routing}", "mode": "generate", "routing": routing, "tokens": tokens,
                      "logits": f32(g["logits"][0]), "hidden": f32(g["hidden"][0]),
                      "layers": [layer_json(t, has_pred) for t in g["layers"]]})
    toks, steps = m.generate_greedy(tokens[:PROMPT_LEN], N_GREEDY, "router")
    layers = []
    for i, t in enumerate(steps[0]["layers"]):
        r = torch.cat([s["layers"][i]["router_logits"] for s in steps], 1)
        sel = torch.cat([s["layers"][i]["selected"] for s in steps], 1)
        p = torch.cat([s["layers"][i]["predictor_logits"] for s in steps], 1) if has_pred else None
        layers.append(layer_json({"layer": t["layer"], "router_logits": r, "selected": sel,
                                  "predictor_logits": p}, has_pred))
    cases.append({"name": "greedy-router", "mode": "generate", "routing": "router",
                  "prompt": tokens[:PROMPT_LEN], "tokens": toks,
                  "logits": f32(torch.cat([s["logits"][0] for s in steps])),
                  "hidden": f32(torch.cat([s["hidden"][0] for s in steps])), "layers": layers})
    return cases


def margins(cases):
    """The smallest |router logit| per case: how close routing is to a tie."""
    out = {}
    for c in cases:
        vals = [np.abs(np.frombuffer(base64.b64decode(l["router_logits"]["f32"]), "<f4")).min() for l in c["layers"]]
        if vals:
            out[c["name"]] = float(min(vals))
    return out


def write_fixture(a, name, m, tokens, work, extra=None):
    ck, cj = save_checkpoint(m, work, name)
    gg = os.path.join(a.out, name + ".gguf")
    convert(a, ck, cj, gg)
    cases = cases_for(m, tokens)
    doc = {"format": FORMAT, "made_by": MADE_BY, "model": name + ".gguf", "cases": cases}
    if extra:
        doc["trained"] = extra
    path = os.path.join(a.out, name + ".fixture.json")
    with open(path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"{path}: {len(cases)} cases; min |router logit| {margins(cases)}", flush=True)


# ---- testdata/convert ----------------------------------------------------------------

def write_safetensors(path, sd):
    header, blobs, off = {}, [], 0
    for k, v in sd.items():
        b = v.detach().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def expected_tensors(m):
    """What the converted GGUF (F32) must hold: GGUF name -> ggml dims + data."""
    sd = m.state_dict()
    cfg = m.cfg
    names = {"tok_embeddings.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    if not cfg.tied_output:
        names["output.weight"] = "output.weight"
    from modllama import GGUF_TO_META
    for i in range(cfg.n_layers):
        for g, meta in GGUF_TO_META.items():
            names[f"layers.{i}.{meta}"] = f"blk.{i}.{g}"
        for t in ("mod_router.weight", "mod_router.bias", "mod_pred_up.weight", "mod_pred_down.weight"):
            if f"layers.{i}.{t}" in sd:
                names[f"layers.{i}.{t}"] = f"blk.{i}.{t}"
    out = {}
    for src, dst in names.items():
        v = sd[src]
        dims = list(reversed(v.shape))
        if dst.endswith("mod_pred_down.weight"):
            dims = [v.numel()]
        out[dst] = {"dims": dims, "f32": base64.b64encode(v.numpy().astype("<f4").tobytes()).decode()}
    return out


def write_convert_testdata(a):
    d = a.convert_out
    os.makedirs(d, exist_ok=True)
    g = GGUFFile(a.vocab)
    kv = {k: v for k, v in g.kv.items() if k.startswith("tokenizer.")}
    write_vocab_gguf(os.path.join(d, "vocab512.gguf"), kv)
    small = dict(dim=16, n_heads=4, n_kv_heads=2, vocab_size=512, ffn_dim=24)
    models = {
        "tiny-mod": ModelConfig(n_layers=3, routed_layers=[1, 2], router_bias=True, predictor_hidden=8,
                                tied_output=True, **small),
        "tiny-dense": ModelConfig(n_layers=2, routed_layers=[], tied_output=False, **small),
    }
    for stem, cfg in models.items():
        m = MoDLlama(cfg).init_weights(seed=11, std=0.1, router_std=0.5)
        with open(os.path.join(d, stem + ".config.json"), "w") as fh:
            fh.write(cfg.to_json() + "\n")
        if stem == "tiny-dense":
            write_safetensors(os.path.join(d, stem + ".safetensors"), m.state_dict())
        else:
            torch.save(m.state_dict(), os.path.join(d, stem + ".pt"))
        with open(os.path.join(d, stem + ".expected.json"), "w") as fh:
            json.dump({"format": "modrun-convert-expected/1", "made_by": MADE_BY,
                       "tensors": expected_tensors(m)}, fh, separators=(",", ":"))
            fh.write("\n")
    print(f"wrote {d}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="testdata/mod")
    p.add_argument("--convert-out", default="testdata/convert")
    p.add_argument("--modrun", default="bin/modrun")
    p.add_argument("--vocab", default=trainer.VOCAB)
    p.add_argument("--train-steps", type=int, default=150)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    write_convert_testdata(a)
    tokens = tokens_of(TEXT, a.vocab, a.modrun)[:SEQ_LEN]
    assert len(tokens) == SEQ_LEN and tokens[0] == 1, tokens
    with tempfile.TemporaryDirectory() as work:
        for name, m in random_models():
            if not only or name in only:
                write_fixture(a, name, m.eval(), tokens, work)
        if not only or "mod-trained" in only:
            m, info = trained_model(a)
            write_fixture(a, "mod-trained", m.eval(), tokens, work, info)


if __name__ == "__main__":
    main()
