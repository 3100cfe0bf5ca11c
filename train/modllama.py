"""Mixture-of-Depths Llama in PyTorch: the reference for mod/ (DESIGN.md §3).

A Llama (RMSNorm, interleaved-pairs RoPE as Meta's Llama / GGUF "norm" rope,
GQA, SwiGLU, tied or untied output) in which the routed blocks process only
some tokens:

  r_i = w . x_i + b                       router logit on the raw block input
  x_i' = x_i + g(r_i) * f(X~)_i           selected tokens; f = whole block - x
  x_i' = x_i                              the others: no attention, MLP or KV

Two ways to choose the selected set:
  eval (= training): top-k per sequence, k = max(1, ceil(c*S)), the k largest r
      with ties to the lower position, taken in ascending position order. A
      static graph: gather k rows, run the block, scatter back.
  generate: causal routing, token by token: r_i > 0 (router) or p_i > 0
      (predictor, a small MLP on stop-gradient x). Each layer keeps a compact KV
      cache of only the tokens it processed, K rotated at original positions.

Parameter names follow Meta's layout, plus layers.N.mod_router.{weight,bias}
and layers.N.mod_pred_up/down.weight. A dense baseline is the same model with
routed_layers = [].
"""

import json
import math
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG_FORMAT = "modrun-train-config/1"


@dataclass
class ModelConfig:
    dim: int = 64
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 4
    vocab_size: int = 512
    ffn_dim: int = 172
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    max_seq_len: int = 512
    tied_output: bool = True
    # None -> every other block starting at 1 (block 0 is always dense); [] -> dense.
    routed_layers: Optional[List[int]] = None
    capacity: float = 0.125
    gate: str = "sigmoid"  # "sigmoid" | "identity"
    router_bias: bool = False
    predictor_hidden: int = -1  # -1 -> dim // 2; 0 -> no predictor
    aux_loss_weight: float = 0.01
    predictor_loss_weight: float = 0.01

    def __post_init__(self):
        if self.routed_layers is None:
            self.routed_layers = list(range(1, self.n_layers, 2))
        self.routed_layers = sorted(int(i) for i in self.routed_layers)
        if self.predictor_hidden < 0:
            self.predictor_hidden = self.dim // 2
        if not self.routed_layers:
            self.predictor_hidden = 0
        if self.gate not in ("sigmoid", "identity"):
            raise ValueError(f"gate {self.gate!r}: want sigmoid or identity")
        if any(i <= 0 or i >= self.n_layers for i in self.routed_layers):
            raise ValueError(f"routed_layers {self.routed_layers}: each must be in 1..{self.n_layers - 1}")
        if not 0 < self.capacity <= 1:
            raise ValueError(f"capacity {self.capacity}: want (0, 1]")
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("dim must divide by n_heads and n_heads by n_kv_heads")

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def to_json(self):
        return json.dumps({"format": CONFIG_FORMAT, **asdict(self)}, indent=2)

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        fmt = d.pop("format", CONFIG_FORMAT)
        if fmt != CONFIG_FORMAT:
            raise ValueError(f"config format {fmt!r}, want {CONFIG_FORMAT!r}")
        return cls(**d)


def capacity_k(capacity, seq_len):
    """k = max(1, ceil(c*S)), exactly as Go's mod.TopK computes it: c rounded
    to float32 as the GGUF stores it, the product taken in float64 less 1e-6,
    so that a product a rounding error above an integer (0.3*10 is
    3.0000000000000004 even in float64) does not round up to the next one."""
    c = float(np.float32(capacity))
    return max(1, min(seq_len, math.ceil(c * seq_len - 1e-6)))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, base):
    """Rotate interleaved pairs (x[2i], x[2i+1]) of each head by pos * base^(-2i/hd).
    x: [B, T, H, hd]; pos: [B, T] original positions."""
    hd = x.shape[-1]
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd/2]
    ang = pos.to(torch.float64)[..., None] * inv  # [B, T, hd/2]
    cos = torch.cos(ang).to(x.dtype)[:, :, None, :]
    sin = torch.sin(ang).to(x.dtype)[:, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # [dim]

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)  # [nHead*hd, dim]
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)  # [nKVHead*hd, dim]
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)  # [nKVHead*hd, dim]
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)  # [dim, nHead*hd]

    def forward(self, xn, pos, cache=None):
        """xn: [B, T, dim] normed rows at original positions pos [B, T].
        cache: None or a dict {"k", "v": [B, n, nKVHead, hd], "pos": [B, n]} of
        earlier rows (K rotated); the new rows are appended to it.
        The causal mask is by original position, so gathered rows attend
        exactly to the selected rows at or before them."""
        c = self.cfg
        B, T, _ = xn.shape
        q = rope(self.wq(xn).view(B, T, c.n_heads, c.head_dim), pos, c.rope_base)
        k = rope(self.wk(xn).view(B, T, c.n_kv_heads, c.head_dim), pos, c.rope_base)
        v = self.wv(xn).view(B, T, c.n_kv_heads, c.head_dim)
        if cache is not None and cache["k"] is not None:
            k = torch.cat([cache["k"], k], 1)
            v = torch.cat([cache["v"], v], 1)
            kpos = torch.cat([cache["pos"], pos], 1)
        else:
            kpos = pos
        if cache is not None:
            cache["k"], cache["v"], cache["pos"] = k, v, kpos
        rep = c.n_heads // c.n_kv_heads  # query head h reads kv head h // rep
        K = k.repeat_interleave(rep, dim=2)
        V = v.repeat_interleave(rep, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, K) / math.sqrt(c.head_dim)
        allowed = kpos[:, None, None, :] <= pos[:, None, :, None]  # [B, 1, T, n]
        s = s.masked_fill(~allowed, float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1), V)
        return self.wo(o.reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # gate [ff, dim]
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # down [dim, ff]
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # up   [ff, dim]

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Router(nn.Module):
    """r = w . x + b: state_dict names mod_router.weight [dim], mod_router.bias [1]."""

    def __init__(self, dim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.bias = nn.Parameter(torch.zeros(1)) if bias else None

    def forward(self, x):
        r = x @ self.weight
        return r + self.bias if self.bias is not None else r


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg = cfg
        self.layer = layer
        self.routed = layer in cfg.routed_layers
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        if self.routed:
            self.mod_router = Router(cfg.dim, cfg.router_bias)
            if cfg.predictor_hidden:
                self.mod_pred_up = nn.Linear(cfg.dim, cfg.predictor_hidden, bias=False)  # [h, dim]
                self.mod_pred_down = nn.Linear(cfg.predictor_hidden, 1, bias=False)  # [1, h]

    def f(self, x, pos, cache=None):
        """The whole block minus its input: f(x) = Attn(n1(x)) + MLP(n2(x + Attn(n1(x))))."""
        a = self.attention(self.attention_norm(x), pos, cache)
        return a + self.feed_forward(self.ffn_norm(x + a))

    def gate(self, r):
        return torch.sigmoid(r) if self.cfg.gate == "sigmoid" else r

    def predictor(self, x):
        """p = w2 . silu(W1 stopgrad(x)): the causal router's stand-in (DESIGN.md §3)."""
        if not hasattr(self, "mod_pred_up"):
            return None
        return self.mod_pred_down(F.silu(self.mod_pred_up(x.detach()))).squeeze(-1)

    def topk_select(self, r):
        """The top-k rule: k largest r per row, ties to the lower position
        (a stable descending sort), returned in ascending position order. [B, k]"""
        k = capacity_k(self.cfg.capacity, r.shape[1])
        order = torch.sort(r, dim=1, descending=True, stable=True).indices
        return order[:, :k].sort(dim=1).values

    def forward_topk(self, x, pos, trace=None):
        """Eval/training mode. x: [B, S, dim]. A static graph sized by k."""
        if not self.routed:
            return x + self.f(x, pos)
        r = self.mod_router(x)  # [B, S]
        idx = self.topk_select(r)  # [B, k]
        D = x.shape[-1]
        xs = x.gather(1, idx[..., None].expand(-1, -1, D))  # [B, k, dim]
        y = xs + self.gate(r.gather(1, idx))[..., None] * self.f(xs, pos.gather(1, idx))
        if trace is not None:
            trace.update(router_logits=r, selected=idx, predictor_logits=self.predictor(x))
        return x.scatter(1, idx[..., None].expand(-1, -1, D), y)

    def forward_causal(self, x, pos, routing, cache, trace=None):
        """Generate mode on a chunk of new tokens (B = 1) after those in cache:
        each token is selected by its own r > 0 (or p > 0), independently of
        the others, so any split of the sequence gives the same result."""
        if not self.routed:
            return x + self.f(x, pos, cache)
        r = self.mod_router(x)[0]  # [T]
        p = self.predictor(x)
        if routing == "router":
            sel = r > 0
        elif routing == "predictor":
            if p is None:
                raise ValueError(f"layer {self.layer} has no predictor")
            sel = p[0] > 0
        else:
            raise ValueError(f"routing {routing!r}: want router or predictor")
        idx = torch.nonzero(sel).flatten()  # ascending positions within the chunk
        if trace is not None:
            trace.update(router_logits=r[None], selected=pos[:, idx], predictor_logits=p)
        if idx.numel() == 0:
            return x  # no token here: no attention, no MLP, no KV entry
        xs = x[:, idx]
        y = xs + self.gate(r[idx])[None, :, None] * self.f(xs, pos[:, idx], cache)
        out = x.clone()
        out[:, idx] = y
        return out


class MoDLlama(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)  # [vocab, dim]
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        if not cfg.tied_output:
            self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)  # [vocab, dim]

    def init_weights(self, seed=0, std=0.02, router_std=0.02):
        """Llama-style init; wo and w2 scaled down by depth (as llama2.c does)."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif "mod_router" in name:
                    p.normal_(0.0, router_std, generator=g) if name.endswith("weight") else p.zero_()
                elif name.endswith("wo.weight") or name.endswith("w2.weight"):
                    p.normal_(0.0, std / math.sqrt(2 * self.cfg.n_layers), generator=g)
                else:
                    p.normal_(0.0, std, generator=g)
        return self

    def logits_of(self, hn):
        w = self.tok_embeddings.weight if self.cfg.tied_output else self.output.weight
        return F.linear(hn, w)

    def forward(self, tokens, targets=None):
        """Eval/training mode (top-k routing). tokens: [B, S] int64.
        Returns a dict: logits [B,S,V], hidden [B,S,dim] (after the final norm),
        layers (per routed layer: router_logits, selected, predictor_logits),
        and with targets: loss, lm_loss, aux_loss, pred_loss."""
        B, S = tokens.shape
        pos = torch.arange(S, device=tokens.device).expand(B, S)
        x = self.tok_embeddings(tokens)
        traces = []
        for blk in self.layers:
            t = {"layer": blk.layer} if blk.routed else None
            x = blk.forward_topk(x, pos, t)
            if t is not None:
                traces.append(t)
        hn = self.norm(x)
        out = {"logits": self.logits_of(hn), "hidden": hn, "layers": traces}
        if targets is not None:
            out.update(self.losses(out["logits"], targets, traces))
        return out

    def losses(self, logits, targets, traces):
        """LM cross-entropy, plus per routed layer the router's BCE against the
        top-k membership (target 1 for the k selected) and the predictor's BCE
        on the same targets (its input is detached, so it trains only itself)."""
        lm = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
        aux = logits.new_zeros(())
        pred = logits.new_zeros(())
        for t in traces:
            r = t["router_logits"]
            tgt = torch.zeros_like(r).scatter(1, t["selected"], 1.0)
            aux = aux + F.binary_cross_entropy_with_logits(r, tgt)
            if t["predictor_logits"] is not None:
                pred = pred + F.binary_cross_entropy_with_logits(t["predictor_logits"], tgt)
        c = self.cfg
        loss = lm + c.aux_loss_weight * aux + c.predictor_loss_weight * pred
        return {"loss": loss, "lm_loss": lm, "aux_loss": aux, "pred_loss": pred}

    def new_cache(self):
        return [{"k": None, "v": None, "pos": None} for _ in self.layers]

    def forward_causal(self, tokens, routing="router", cache=None, start_pos=0):
        """Generate mode on new tokens [1, T] at positions start_pos.. (B = 1),
        appending to cache (a list per layer; routed layers hold only the
        tokens they selected). Returns logits, hidden, per-routed-layer traces."""
        T = tokens.shape[1]
        if cache is None:
            cache = self.new_cache()
        pos = torch.arange(start_pos, start_pos + T, device=tokens.device)[None]
        x = self.tok_embeddings(tokens)
        traces = []
        for blk, c in zip(self.layers, cache):
            t = {"layer": blk.layer} if blk.routed else None
            x = blk.forward_causal(x, pos, routing, c, t)
            if t is not None:
                traces.append(t)
        hn = self.norm(x)
        return {"logits": self.logits_of(hn), "hidden": hn, "layers": traces, "cache": cache}

    @torch.no_grad()
    def generate_greedy(self, prompt, n_new, routing="router"):
        """Prefill the prompt in one chunk, then decode n_new greedy tokens one
        at a time with the compact KV cache; the last new token is fed too, so
        the steps hold logits for every position. Returns (tokens, steps)."""
        steps = [self.forward_causal(torch.tensor([prompt]), routing)]
        cache = steps[0]["cache"]
        toks = list(prompt)
        for _ in range(n_new):
            toks.append(int(steps[-1]["logits"][0, -1].argmax()))
            steps.append(self.forward_causal(torch.tensor([toks[-1:]]), routing, cache, len(toks) - 1))
        return toks, steps


# ---- loading: checkpoints and dense GGUF (retrofit) ------------------------

GGUF_TO_META = {
    "attn_q.weight": "attention.wq.weight",
    "attn_k.weight": "attention.wk.weight",
    "attn_v.weight": "attention.wv.weight",
    "attn_output.weight": "attention.wo.weight",
    "attn_norm.weight": "attention_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "ffn_gate.weight": "feed_forward.w1.weight",
    "ffn_down.weight": "feed_forward.w2.weight",
    "ffn_up.weight": "feed_forward.w3.weight",
}


def config_from_gguf(g, **overrides):
    """A ModelConfig from a dense llama GGUF's metadata (overrides win)."""
    a = g.kv.get("general.architecture", "llama")
    emb = g.tensor("token_embd.weight")
    d = dict(
        dim=int(g.kv[f"{a}.embedding_length"]),
        n_layers=int(g.kv[f"{a}.block_count"]),
        n_heads=int(g.kv[f"{a}.attention.head_count"]),
        n_kv_heads=int(g.kv.get(f"{a}.attention.head_count_kv", g.kv[f"{a}.attention.head_count"])),
        vocab_size=emb.shape[0],
        ffn_dim=int(g.kv[f"{a}.feed_forward_length"]),
        norm_eps=float(g.kv.get(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(g.kv.get(f"{a}.rope.freq_base", 10000.0)),
    )
    if "output.weight" in g.tensors:
        d["tied_output"] = bool(np.array_equal(g.tensor("output.weight"), emb))
    d.update(overrides)
    return ModelConfig(**d)


def load_dense_gguf(model, g, layer_map=None):
    """Copy a dense llama GGUF's weights into model; routers and predictors
    keep their init (retrofit). Linear weights: GGUF dims [in, out] are the
    same bytes as PyTorch's [out, in]. layer_map {model layer: GGUF block}
    places the GGUF's blocks (default: block i into layer i, all layers);
    layers it leaves out keep their init."""
    if layer_map is None:
        layer_map = {i: i for i in range(model.cfg.n_layers)}
    sd = {"tok_embeddings.weight": g.tensor("token_embd.weight"), "norm.weight": g.tensor("output_norm.weight")}
    if not model.cfg.tied_output:
        sd["output.weight"] = g.tensor("output.weight" if "output.weight" in g.tensors else "token_embd.weight")
    for i, j in layer_map.items():
        for gn, mn in GGUF_TO_META.items():
            sd[f"layers.{i}.{mn}"] = g.tensor(f"blk.{j}.{gn}")
    own = model.state_dict()
    with torch.no_grad():
        for k, v in sd.items():
            if tuple(own[k].shape) != v.shape:
                raise ValueError(f"{g.path}: {k} has shape {v.shape}, model wants {tuple(own[k].shape)}")
            own[k].copy_(torch.from_numpy(v))
    return model


def grow_interleaved(model, g):
    """Depth growth: a dense GGUF of L blocks into a model of 2L-1 layers,
    its blocks at the even layers 0, 2, .., 2L-2 and new blocks at the odd
    ones (the default routed layers), whose output projections (wo, w2) start
    at zero, so every new block starts as the identity and the grown model
    computes exactly what the GGUF's model does."""
    n = int(g.kv[f"{g.kv.get('general.architecture', 'llama')}.block_count"])
    if model.cfg.n_layers != 2 * n - 1:
        raise ValueError(f"{g.path}: {n} blocks grow into {2 * n - 1} layers, model has {model.cfg.n_layers}")
    load_dense_gguf(model, g, {2 * j: j for j in range(n)})
    with torch.no_grad():
        for i in range(1, model.cfg.n_layers, 2):
            model.layers[i].attention.wo.weight.zero_()
            model.layers[i].feed_forward.w2.weight.zero_()
    return model


def model_from_gguf(g):
    """A whole model, MoD tensors included, from a GGUF written by `modrun
    convert` (F32/F16 tensors): the check that a fixture's GGUF and its JSON
    describe the same model."""
    a = g.kv["general.architecture"]
    over = {"routed_layers": [], "predictor_hidden": 0}
    if a == "llama-mod":
        over = dict(routed_layers=[int(i) for i in g.kv[f"{a}.mod.routed_layers"]],
                    capacity=float(g.kv[f"{a}.mod.capacity"]), gate=g.kv[f"{a}.mod.gate"],
                    predictor_hidden=int(g.kv[f"{a}.mod.predictor_hidden"]))
        over["router_bias"] = f"blk.{over['routed_layers'][0]}.mod_router.bias" in g.tensors
    over["tied_output"] = "output.weight" not in g.tensors
    m = MoDLlama(config_from_gguf(g, **over))
    load_dense_gguf(m, g)
    own = m.state_dict()
    with torch.no_grad():
        for i in m.cfg.routed_layers:
            for t in ("mod_router.weight", "mod_router.bias", "mod_pred_up.weight", "mod_pred_down.weight"):
                k = f"layers.{i}.{t}"
                if k in own:
                    own[k].copy_(torch.from_numpy(g.tensor(f"blk.{i}.{t}")).reshape(own[k].shape))
    return m
