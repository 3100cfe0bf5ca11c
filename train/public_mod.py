"""The public MoD implementations' forward passes, re-implemented from their
semantics (issue 22), for the golden fixtures that mod/ and `modrun convert`
are checked against. Not their code: the facts only.

MoD Llama 2 (github sramshetty/mixture-of-depths), Meta names:
  one router Linear(dim, 1, no bias), shared by every block and so saved as
  router.weight and again as layers.N.router.weight for every N; with the
  auxiliary router, aux_router.0 (dim -> dim/2), SiLU, aux_router.2 (-> 1),
  saved the same way. Block l is routed iff l % router_skip_blocks != 0.
  A routed block over n tokens: w = sigmoid(router(x)); the top
  k = min(n, capacity) tokens by w (capacity is a token count), taken in
  sequence order; the block runs on them alone at compact positions 0..k-1,
  h = x + attn(norm(x)), out = h + w * mlp(norm(h)), and out is added onto the
  residual (scatter_add): a selected token ends at x + out.
  Causal: enter iff router(x) > 0 (or aux(x) > 0); position = index among the
  tokens that entered the block so far; the MLP is still scaled by w.

Mixture-AI wrapper (github Mixture-AI/Mixture-of-Depths) around any block:
  router_mlp and aux_mlp, Linear(dim, 1) WITH bias; the wrapped block under
  transformer_block. (Meta or Hugging Face names). r = router_mlp(x), raw; the
  top k = int(n * capacity) by r, in sequence order; the block runs on them
  alone (compact positions, causal among them) and its output, residual
  included, is multiplied by r. Causal: enter iff aux_mlp(x) > 0.

Hugging Face Llama: HF names, rotate-half RoPE (q/k rows in HF's order).

Batch size 1 throughout: the fixtures score one sequence.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from modllama import Attention, FeedForward, ModelConfig, RMSNorm


def llama2_ffn_dim(dim, multiple_of, ffn_dim_multiplier=None):
    """Llama 2's SwiGLU width: int(2*4*dim/3), times the multiplier, rounded up
    to a multiple of multiple_of."""
    h = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        h = int(ffn_dim_multiplier * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def hf_from_meta_rows(w, n_heads):
    """Meta's interleaved q/k rows -> HF's rotate-half order: within a head,
    row 2i+c moves to c*hd/2+i."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.view(n_heads, hd // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def meta_from_hf_rows(w, n_heads):
    rows, cols = w.shape
    hd = rows // n_heads
    return w.view(n_heads, 2, hd // 2, cols).transpose(1, 2).reshape(rows, cols)


def rope_half(x, pos, base):
    """HF's RoPE: rotate (x[i], x[i+hd/2]) by pos * base^(-2i/hd). x: [B, T, H, hd]."""
    hd = x.shape[-1]
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos.to(torch.float64)[..., None] * inv
    cos = torch.cos(ang).to(x.dtype)[:, :, None, :]
    sin = torch.sin(ang).to(x.dtype)[:, :, None, :]
    x0, x1 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)


class HFAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, xn, pos):
        c = self.cfg
        B, T, _ = xn.shape
        q = rope_half(self.q_proj(xn).view(B, T, c.n_heads, c.head_dim), pos, c.rope_base)
        k = rope_half(self.k_proj(xn).view(B, T, c.n_kv_heads, c.head_dim), pos, c.rope_base)
        v = self.v_proj(xn).view(B, T, c.n_kv_heads, c.head_dim)
        rep = c.n_heads // c.n_kv_heads
        K, V = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, K) / math.sqrt(c.head_dim)
        s = s.masked_fill(pos[:, None, None, :] > pos[:, None, :, None], float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1), V)
        return self.o_proj(o.reshape(B, T, -1))


class HFMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    """A Llama block under Meta's names (names="meta") or HF's ("hf")."""

    def __init__(self, cfg, names):
        super().__init__()
        if names == "meta":
            self.attention, self.feed_forward = Attention(cfg), FeedForward(cfg)
            self.attention_norm, self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps), RMSNorm(cfg.dim, cfg.norm_eps)
            self.parts = lambda: (self.attention_norm, self.attention, self.ffn_norm, self.feed_forward)
        else:
            self.self_attn, self.mlp = HFAttention(cfg), HFMLP(cfg)
            self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
            self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
            self.parts = lambda: (self.input_layernorm, self.self_attn, self.post_attention_layernorm, self.mlp)

    def forward(self, x, pos, mlp_scale=None):
        """h = x + attn(norm1(x)); returns h + s * mlp(norm2(h)), s = mlp_scale
        ([B, T]) or 1. pos: [B, T], the RoPE positions and the causal order."""
        n1, attn, n2, mlp = self.parts()
        h = x + attn(n1(x), pos)
        m = mlp(n2(h))
        if mlp_scale is not None:
            m = m * mlp_scale[..., None]
        return h + m


def topk_indices(score, k):
    """The k largest scores ([T]), ties to the lower index, in index order."""
    order = torch.sort(score, descending=True, stable=True).indices[:k]
    return order.sort().values


def select(mode, k, topk_score, router, aux):
    """The indices a routed block takes: top-k in eval mode, else the causal
    rule: router (or aux) logit > 0, i.e. sigmoid > 0.5."""
    if mode == "eval":
        return topk_indices(topk_score, k)
    score = {"router": router, "predictor": aux}[mode]
    if score is None:
        raise ValueError(f"routing {mode}: the model has no such score")
    return torch.nonzero(score > 0).flatten()


def compact(idx):
    """Compact RoPE positions of the selected tokens: 0..k-1. [1, k]"""
    return torch.arange(idx.numel())[None]


def trace(layer, r, p, idx):
    return {"layer": layer, "router_logits": r, "predictor_logits": p, "selected": idx}


class LlamaCommon(nn.Module):
    def config(self, dim, n_layers, n_heads, n_kv_heads, vocab_size, ffn_dim, norm_eps, rope_base, max_seq_len):
        return ModelConfig(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                           vocab_size=vocab_size, ffn_dim=ffn_dim, norm_eps=norm_eps, rope_base=rope_base,
                           max_seq_len=max_seq_len, routed_layers=[])

    def init_weights(self, seed, std=0.1, router_std=0.3):
        """Random weights: norms near 1, routers wide enough that decisions
        have margins (the fixtures check every one)."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
                elif "embed" in name:
                    p.normal_(0.0, 1.0, generator=g)
                elif "router" in name or "aux" in name:
                    p.normal_(0.0, router_std, generator=g)
                else:
                    p.normal_(0.0, std, generator=g)
        return self


class MoDLlama2(LlamaCommon):
    """The MoD Llama 2 layout. params: the params.json dict (ModelArgs)."""

    def __init__(self, params):
        super().__init__()
        a = dict(params)
        self.params = a
        n_kv = a.get("n_kv_heads") or a["n_heads"]
        ff = llama2_ffn_dim(a["dim"], a["multiple_of"], a.get("ffn_dim_multiplier"))
        self.cfg = self.config(a["dim"], a["n_layers"], a["n_heads"], n_kv, a["vocab_size"], ff,
                               a["norm_eps"], a.get("rope_theta", 10000.0), a.get("max_seq_len", 2048))
        self.tok_embeddings = nn.Embedding(a["vocab_size"], a["dim"])
        self.router = self.aux_router = None
        if a.get("routing", True):  # bools are saved as 0/1
            self.router = nn.Linear(a["dim"], 1, bias=False)
            if a.get("aux_routing", False):
                self.aux_router = nn.Sequential(nn.Linear(a["dim"], a["dim"] // 2, bias=False), nn.SiLU(),
                                                nn.Linear(a["dim"] // 2, 1, bias=False))
        self.layers = nn.ModuleList()
        for _ in range(a["n_layers"]):
            blk = LlamaBlock(self.cfg, "meta")
            blk.router, blk.aux_router = self.router, self.aux_router  # shared: saved under each block too
            self.layers.append(blk)
        self.norm = RMSNorm(a["dim"], a["norm_eps"])
        self.output = nn.Linear(a["dim"], a["vocab_size"], bias=False)

    def routed(self, layer):
        return self.router is not None and layer % self.params.get("router_skip_blocks", 2) != 0

    def forward(self, tokens, mode="eval"):
        T = tokens.shape[1]
        x = self.tok_embeddings(tokens)
        pos = torch.arange(T)[None]
        traces = []
        for i, blk in enumerate(self.layers):
            if not self.routed(i):
                x = blk(x, pos)
                continue
            r = self.router(x)[0, :, 0]  # [T]
            p = self.aux_router(x)[0, :, 0] if self.aux_router is not None else None
            w = torch.sigmoid(r)
            idx = select(mode, min(T, self.params["capacity"]), w, r, p)
            traces.append(trace(i, r, p, idx))
            if idx.numel():
                out = blk(x[:, idx], compact(idx), mlp_scale=w[idx][None])
                x = x.clone()
                x[:, idx] = x[:, idx] + out  # scatter_add onto the residual
        h = self.norm(x)
        return {"logits": self.output(h), "layers": traces}


class MoDWrapper(nn.Module):
    def __init__(self, block, dim):
        super().__init__()
        self.transformer_block = block
        self.router_mlp = nn.Linear(dim, 1)
        self.aux_mlp = nn.Linear(dim, 1)


class WrappedLlama(LlamaCommon):
    """A Llama (Meta or HF names) whose blocks in `wrapped` are Mixture-AI
    MoD wrappers; with wrapped = [] and HF names, a plain HF Llama."""

    def __init__(self, cfg, names, wrapped, capacity=0.125, tied=False):
        super().__init__()
        self.cfg, self.names, self.wrapped, self.capacity, self.tied = cfg, names, list(wrapped), capacity, tied
        blocks = nn.ModuleList()
        for i in range(cfg.n_layers):
            b = LlamaBlock(cfg, names)
            blocks.append(MoDWrapper(b, cfg.dim) if i in self.wrapped else b)
        emb, norm = nn.Embedding(cfg.vocab_size, cfg.dim), RMSNorm(cfg.dim, cfg.norm_eps)
        head = None if tied else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if names == "meta":
            self.tok_embeddings, self.layers, self.norm, self.output = emb, blocks, norm, head
        else:
            self.model = nn.Module()
            self.model.embed_tokens, self.model.layers, self.model.norm = emb, blocks, norm
            self.lm_head = head

    def parts(self):
        if self.names == "meta":
            return self.tok_embeddings, self.layers, self.norm, self.output
        return self.model.embed_tokens, self.model.layers, self.model.norm, self.lm_head

    def forward(self, tokens, mode="eval"):
        emb, layers, norm, head = self.parts()
        T = tokens.shape[1]
        x = emb(tokens)
        pos = torch.arange(T)[None]
        traces = []
        for i, blk in enumerate(layers):
            if i not in self.wrapped:
                x = blk(x, pos)
                continue
            r = blk.router_mlp(x)[0, :, 0]  # [T], raw
            p = blk.aux_mlp(x)[0, :, 0]
            idx = select(mode, int(T * self.capacity), r, r, p)
            traces.append(trace(i, r, p, idx))
            if idx.numel():
                out = blk.transformer_block(x[:, idx], compact(idx)) * r[idx][None, :, None]
                x = x.clone()
                x[:, idx] = out  # the output, residual included, scaled by r
        h = norm(x)
        w = emb.weight if head is None else head.weight
        return {"logits": F.linear(h, w), "layers": traces}


def nll(logits, tokens):
    """Mean next-token NLL of one sequence, in nats (float64)."""
    return float(F.cross_entropy(logits[0, :-1].double(), tokens[0, 1:]))
