#!/usr/bin/python3
"""Write the golden fixtures of the public MoD layouts (testdata/convert/NAME/):
random-weight checkpoints saved by PyTorch under each layout's exact tensor
names, the layout's own config file, and golden.json (format
modrun-public-fixture/1): the tokens, and per case (eval = top-k; generate-*
= causal routing over the whole sequence) the logits, the NLL and every
routed layer's router/predictor logits and selected positions, from the
forward passes in public_mod.py.

  NAME              checkpoint                config
  modllama2-aux     consolidated.00.pth       params.json (MoD Llama 2, aux router)
  modllama2         checkpoint_epoch-0.pth    params.json (MoD Llama 2, ffn_dim_multiplier, skip 3)
  mixtureai-meta    consolidated.00.pth       params.json + capacity (wrapper, Meta names)
  mixtureai-hf      pytorch_model.bin         config.json + capacity (wrapper, HF names)
  hf-dense          model.safetensors         config.json (Hugging Face Llama)
  meta-dense        consolidated.00.pth       params.json (hf-dense's Meta twin)

Run: /usr/bin/python3 train/public_fixtures.py (a few seconds; no data needed).
"""

import argparse
import base64
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixtures import write_safetensors  # noqa: E402
from modllama import ModelConfig  # noqa: E402
from public_mod import MoDLlama2, WrappedLlama, llama2_ffn_dim, meta_from_hf_rows, nll  # noqa: E402

FORMAT = "modrun-public-fixture/1"
SEQ_LEN = 29
VOCAB = 512  # testdata/convert/vocab512.gguf
MARGIN = 2e-3  # every decision at least this far from its threshold or tie


def f32(t):
    a = t.detach().numpy().astype("<f4")
    return {"shape": list(a.shape), "f32": base64.b64encode(a.tobytes()).decode()}


def margin(out, mode, k_of):
    """The closest call among the routing decisions of one forward: in eval
    mode the gap between the k-th and (k+1)-th score, else min |score|."""
    m = float("inf")
    for t in out["layers"]:
        if mode == "eval":
            s = torch.sort(k_of(t), descending=True).values
            k = t["selected"].numel()
            if 0 < k < s.numel():
                m = min(m, float(s[k - 1] - s[k]))
        else:
            s = t["router_logits"] if mode == "router" else t["predictor_logits"]
            m = min(m, float(s.abs().min()))
    return m


@torch.no_grad()
def cases(model, tokens, modes, k_of):
    out = []
    for mode in modes:
        o = model(tokens, mode)
        assert margin(o, mode, k_of) > MARGIN, (mode, margin(o, mode, k_of))
        layers = []
        for t in o["layers"]:
            d = {"layer": t["layer"], "router_logits": f32(t["router_logits"]), "selected": t["selected"].tolist()}
            if t["predictor_logits"] is not None:
                d["predictor_logits"] = f32(t["predictor_logits"])
            layers.append(d)
            assert 0 < len(d["selected"]) < tokens.shape[1] or mode == "eval", (mode, t["layer"], d["selected"])
        out.append({"name": "eval" if mode == "eval" else f"generate-{mode}", "mode": "eval" if mode == "eval" else "generate",
                    "routing": "topk" if mode == "eval" else mode, "logits": f32(o["logits"][0]),
                    "nll": nll(o["logits"], tokens), "layers": layers})
    return out


def first_good_seed(build, tokens, modes, k_of, router_std=0.3):
    """Random weights whose routing decisions all have margins (a test that
    compares decisions must not hinge on a float's last bit)."""
    for seed in range(100):
        m = build().init_weights(seed, router_std=router_std).eval()
        try:
            return m, cases(m, tokens, modes, k_of)
        except AssertionError:
            continue
    raise SystemExit("no seed in 0..99 gives routing margins; change the fixture's shape")


def sd_of(m):
    return {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}


def write(d, name, ckpt, sd, cfg_name, cfg, layout, tokens, cs):
    out = os.path.join(d, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, ckpt)
    if ckpt.endswith(".safetensors"):
        write_safetensors(path, sd)
    else:
        torch.save(sd, path)
    with open(os.path.join(out, cfg_name), "w") as fh:
        json.dump(cfg, fh, indent=1)
        fh.write("\n")
    with open(os.path.join(out, "golden.json"), "w") as fh:
        json.dump({"format": FORMAT, "made_by": "train/public_fixtures.py", "layout": layout, "checkpoint": ckpt,
                   "config": cfg_name, "tokens": tokens[0].tolist(), "cases": cs}, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"{out}: {layout}, {len(cs)} cases", flush=True)


def modllama2_params(**kw):
    """params.json as the MoD Llama 2 trainer writes it: max_batch_size and
    max_seq_len dropped, None values dropped, bools as 0/1."""
    p = dict(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, multiple_of=16, norm_eps=1e-5,
             routing=1, aux_routing=0, capacity=9, router_skip_blocks=2, aux_loss=0)
    p.update(kw)
    return p


def hf_config(cfg, tied, **kw):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.dim,
         "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
         "intermediate_size": cfg.ffn_dim, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_base,
         "vocab_size": cfg.vocab_size, "tie_word_embeddings": tied, "max_position_embeddings": cfg.max_seq_len,
         "hidden_act": "silu", "torch_dtype": "float32"}
    c.update(kw)
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="testdata/convert")
    a = p.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(22)
    tokens = torch.cat([torch.tensor([[1]]), torch.randint(3, VOCAB, (1, SEQ_LEN - 1), generator=g)], 1)
    sig = lambda t: torch.sigmoid(t["router_logits"])  # noqa: E731  MoD Llama 2 ranks by sigmoid(r)
    raw = lambda t: t["router_logits"]  # noqa: E731  the wrapper ranks by r

    pa = modllama2_params(aux_routing=1, aux_loss=1)
    m, cs = first_good_seed(lambda: MoDLlama2(pa), tokens, ["eval", "router", "predictor"], sig)
    write(a.out, "modllama2-aux", "consolidated.00.pth", sd_of(m), "params.json", pa, "mod-llama2", tokens, cs)

    pb = modllama2_params(n_layers=3, n_kv_heads=4, ffn_dim_multiplier=1.3, router_skip_blocks=3, capacity=40, rope_theta=5000.0)
    m, cs = first_good_seed(lambda: MoDLlama2(pb), tokens, ["eval", "router"], sig)
    write(a.out, "modllama2", "checkpoint_epoch-0.pth", sd_of(m), "params.json", pb, "mod-llama2", tokens, cs)

    cfg = ModelConfig(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, ffn_dim=llama2_ffn_dim(32, 16),
                      norm_eps=1e-5, rope_base=10000.0, max_seq_len=256, routed_layers=[])
    m, cs = first_good_seed(lambda: WrappedLlama(cfg, "meta", [0, 2], capacity=0.25), tokens, ["eval", "predictor"], raw,
                            router_std=0.1)  # the wrapper scales the output, residual included, by r
    params = dict(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, multiple_of=16, norm_eps=1e-5,
                  max_seq_len=256, capacity=0.25)
    write(a.out, "mixtureai-meta", "consolidated.00.pth", sd_of(m), "params.json", params, "mixture-ai", tokens, cs)

    hcfg = ModelConfig(dim=32, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, ffn_dim=40, norm_eps=1e-6,
                       rope_base=500000.0, max_seq_len=128, routed_layers=[])
    m, cs = first_good_seed(lambda: WrappedLlama(hcfg, "hf", [1, 2], capacity=0.5, tied=True), tokens, ["eval", "predictor"], raw,
                            router_std=0.1)
    write(a.out, "mixtureai-hf", "pytorch_model.bin", sd_of(m), "config.json", hf_config(hcfg, True, capacity=0.5),
          "mixture-ai", tokens, cs)

    dcfg = ModelConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, ffn_dim=48, norm_eps=1e-5,
                       rope_base=10000.0, max_seq_len=128, routed_layers=[])
    m, cs = first_good_seed(lambda: WrappedLlama(dcfg, "hf", []), tokens, ["eval"], raw)
    hsd = sd_of(m)
    write(a.out, "hf-dense", "model.safetensors", hsd, "config.json", hf_config(dcfg, False), "hf-llama", tokens, cs)
    # Its Meta twin: the same weights under Meta's names, q/k rows back in
    # Meta's interleaved order; a plain Llama 2 params.json (its FFN rule
    # gives 48 for dim 32 with ffn_dim_multiplier 0.5).
    twin = {"tok_embeddings.weight": hsd["model.embed_tokens.weight"], "norm.weight": hsd["model.norm.weight"],
            "output.weight": hsd["lm_head.weight"]}
    meta_names = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
                  "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
                  "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(dcfg.n_layers):
        for hf, meta in meta_names.items():
            w = hsd[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                w = meta_from_hf_rows(w, dcfg.n_heads)
            elif hf == "self_attn.k_proj":
                w = meta_from_hf_rows(w, dcfg.n_kv_heads)
            twin[f"layers.{i}.{meta}.weight"] = w.contiguous()
    tp = dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, multiple_of=16, ffn_dim_multiplier=0.5,
              norm_eps=1e-5)
    assert llama2_ffn_dim(32, 16, 0.5) == dcfg.ffn_dim
    write(a.out, "meta-dense", "consolidated.00.pth", twin, "params.json", tp, "meta-llama", tokens, cs)


if __name__ == "__main__":
    main()
