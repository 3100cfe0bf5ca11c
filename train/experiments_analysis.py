"""Analysis for train/experiments.py (issue 8): accuracy of causal routing
against top-k membership, causal-mode losses, FLOPs, throughput, report.
Run through `train/experiments.py CMD`; writes runs/NAME/analysis.json,
runs/throughput.json, bench/results/mod_vs_dense.{md,png}."""

import glob
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import experiments as ex  # noqa: E402
import train as trainer  # noqa: E402
from modllama import MoDLlama, ModelConfig, capacity_k  # noqa: E402

ROOT = ex.ROOT
RUNS = ex.RUNS
RESULTS = os.path.join(ROOT, "bench", "results")
B, S = 16, 256  # the training batch of every run


def load_run(name):
    if name == "stories260K":  # the anchor: the dense GGUF itself, before any training here
        from gguf_io import GGUFFile
        from modllama import config_from_gguf, load_dense_gguf
        g = GGUFFile(ex.STORIES260K)
        return load_dense_gguf(MoDLlama(config_from_gguf(g, routed_layers=[])), g).eval()
    d = os.path.join(RUNS, name)
    cfg = ModelConfig.from_json(open(os.path.join(d, "config.json")).read())
    m = MoDLlama(cfg)
    m.load_state_dict(torch.load(os.path.join(d, "ckpt.pt")))
    return m.eval()


def val_ids():
    return trainer.tokenize_file(trainer.VAL_FILE, trainer.VOCAB, os.path.join(ROOT, "bin", "modrun"),
                                 os.path.join(os.path.expanduser("~/.cache"), "modrun", "train"))


# ---- FLOPs ---------------------------------------------------------------------

def fwd_flops_per_token(cfg, seq=S):
    """Forward FLOPs per token (2 per multiply-add) of a sequence of `seq`
    tokens in top-k mode: projections and MLP for the tokens a block
    processes, causal attention (QK^T and AV over the average (n+1)/2 visible
    rows among the n processed), router and predictor on every token of a
    routed block, and the output matrix. Embedding lookups and norms are not
    counted."""
    D, F_, V = cfg.dim, cfg.ffn_dim, cfg.vocab_size
    kv = cfg.n_kv_heads * cfg.head_dim
    proj = 2 * (D * D + 2 * D * kv + D * D) + 2 * 3 * D * F_
    tot = 2 * D * V
    for layer in range(cfg.n_layers):
        if layer in cfg.routed_layers:
            k = capacity_k(cfg.capacity, seq)
            frac = k / seq
            tot += frac * (proj + 2 * 2 * D * (k + 1) / 2) + 2 * D
            if cfg.predictor_hidden:
                tot += 2 * D * cfg.predictor_hidden + 2 * cfg.predictor_hidden
        else:
            tot += proj + 2 * 2 * D * (seq + 1) / 2
    return tot


def train_flops_per_step(cfg):
    return 3 * fwd_flops_per_token(cfg) * B * S


# ---- accuracy of causal routing, causal losses ------------------------------------

@torch.no_grad()
def analyze(*names, windows="64", seq=str(S)):
    """For each run: top-k (eval) val loss, per routed layer the accuracy of
    r > 0 and p > 0 against top-k membership (teacher-forced top-k forward, as
    the paper measures it), the fractions r > 0 and p > 0, and the causal-mode
    val loss (each window scored in one causal chunk: routing by r > 0 / p > 0
    per token, as in generation)."""
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    windows, seq = int(windows), int(seq)
    vx, vy = trainer.val_windows(val_ids(), seq, windows)
    names = names or [os.path.basename(p) for p in sorted(glob.glob(os.path.join(RUNS, "*"))) if os.path.isdir(p)
                      and os.path.exists(os.path.join(p, "ckpt.pt"))]
    for name in names:
        m = load_run(name)
        res = {"run": name, "windows": len(vx), "seq": seq}
        out_lm, stats = [], {}
        for i in range(0, len(vx), 16):
            o = m(vx[i:i + 16], vy[i:i + 16])
            out_lm.append(float(o["lm_loss"]) * len(vx[i:i + 16]))
            for t in o["layers"]:
                r = t["router_logits"]
                tgt = torch.zeros_like(r, dtype=torch.bool).scatter(1, t["selected"], True)
                s = stats.setdefault(t["layer"], {"n": 0, "pos": 0, "r_pos": 0, "r_ok": 0, "r_tp": 0,
                                                  "p_pos": 0, "p_ok": 0, "p_tp": 0})
                s["n"] += r.numel()
                s["pos"] += int(tgt.sum())
                s["r_pos"] += int((r > 0).sum())
                s["r_ok"] += int(((r > 0) == tgt).sum())
                s["r_tp"] += int(((r > 0) & tgt).sum())
                p = t["predictor_logits"]
                if p is not None:
                    s["p_pos"] += int((p > 0).sum())
                    s["p_ok"] += int(((p > 0) == tgt).sum())
                    s["p_tp"] += int(((p > 0) & tgt).sum())
        res["topk_val_loss"] = sum(out_lm) / len(vx)
        layers = {}
        for l, s in stats.items():
            d = {"topk_fraction": s["pos"] / s["n"], "router_pos_fraction": s["r_pos"] / s["n"],
                 "router_accuracy": s["r_ok"] / s["n"], "router_recall": s["r_tp"] / max(1, s["pos"])}
            if m.cfg.predictor_hidden:
                d.update(predictor_pos_fraction=s["p_pos"] / s["n"], predictor_accuracy=s["p_ok"] / s["n"],
                         predictor_recall=s["p_tp"] / max(1, s["pos"]))
            layers[str(l)] = d
        res["layers"] = layers
        routings = []
        if m.cfg.routed_layers:
            routings = ["router"] + (["predictor"] if m.cfg.predictor_hidden else [])
        for routing in routings:
            tot, n, sel = 0.0, 0, {}
            for i in range(len(vx)):
                o = m.forward_causal(vx[i:i + 1], routing)
                tot += float(F.cross_entropy(o["logits"][0], vy[i], reduction="sum"))
                n += vy.shape[1]
                for t in o["layers"]:
                    sel[t["layer"]] = sel.get(t["layer"], 0) + t["selected"].numel()
            res[f"causal_{routing}_val_loss"] = tot / n
            res[f"causal_{routing}_fraction"] = {str(l): c / n for l, c in sel.items()}
        # What the odd layers (the routed ones of a MoD model; the new ones of a grown model) add:
        # the top-k val loss with every odd layer skipped by all tokens.
        odd = [blk for blk in m.layers if blk.layer % 2 == 1]
        for blk in odd:
            blk.forward_topk = lambda x, pos, trace=None: x
        res["odd_layers_skipped_val_loss"] = sum(
            float(F.cross_entropy(m(vx[i:i + 16])["logits"].flatten(0, 1), vy[i:i + 16].flatten(), reduction="sum"))
            for i in range(0, len(vx), 16)) / vy.numel()
        for blk in odd:
            del blk.forward_topk
        res["fwd_flops_per_token"] = fwd_flops_per_token(m.cfg)
        res["train_flops_per_step"] = train_flops_per_step(m.cfg)
        res["params"] = sum(p.numel() for p in m.parameters())
        os.makedirs(os.path.join(RUNS, name), exist_ok=True)
        with open(os.path.join(RUNS, name, "analysis.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        print(json.dumps(res, indent=1), flush=True)


# ---- throughput ------------------------------------------------------------------

def throughput(rounds="4", steps="5", threads="2"):
    """Training samples/s (a sample = one 256-token sequence, batch 16) of the
    three from-scratch configurations, measured in one process, interleaved
    round by round so the load of the (shared) machine hits all alike; the
    median of the rounds. Also eval-mode (no grad) samples/s."""
    torch.set_num_threads(int(threads))
    cfgs = {}
    for run, args in ex.QUEUES["scratch"]:
        cfgs[run] = ModelConfig.from_json(open(os.path.join(RUNS, run, "config.json")).read())
    models = {k: MoDLlama(c).init_weights(seed=1) for k, c in cfgs.items()}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 512, (B, S), generator=g)
    y = torch.randint(0, 512, (B, S), generator=g)
    tr = {k: [] for k in models}
    ev = {k: [] for k in models}
    trc = {k: [] for k in models}
    evc = {k: [] for k in models}
    for k, m in models.items():  # warm up
        m(x, y)["loss"].backward()
    for _ in range(int(rounds)):
        for k, m in models.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(int(steps)):
                o = m(x, y)
                opts[k].zero_grad(set_to_none=True)
                o["loss"].backward()
                opts[k].step()
            tr[k].append(B * int(steps) / (time.perf_counter() - t0))
            trc[k].append(B * int(steps) / (time.process_time() - c0))
            with torch.no_grad():
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(int(steps)):
                    m(x, y)
                ev[k].append(B * int(steps) / (time.perf_counter() - t0))
                evc[k].append(B * int(steps) / (time.process_time() - c0))
    # The machine is shared: wall-clock rates swing with the other jobs' load, so the rates per
    # CPU-second (process time, 1 thread) are the ones to compare; both are kept.
    res = {k: {"train_samples_per_cpu_s": statistics.median(trc[k]), "eval_samples_per_cpu_s": statistics.median(evc[k]),
               "train_samples_per_s": statistics.median(tr[k]), "eval_samples_per_s": statistics.median(ev[k]),
               "train_rounds_wall": tr[k], "eval_rounds_wall": ev[k], "train_rounds_cpu": trc[k],
               "eval_rounds_cpu": evc[k]} for k in models}
    res["_setup"] = {"threads": int(threads), "batch": B, "seq": S, "rounds": int(rounds), "steps": int(steps),
                     "torch": torch.__version__, "blas": os.environ.get("LD_LIBRARY_PATH", "system")}
    with open(os.path.join(RUNS, "throughput.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(json.dumps(res, indent=1))


# ---- report ------------------------------------------------------------------------

# From stories260K's weights: session 1's same-shape retrofit, its distilled rerun, and the shipped
# grown pair. (The distilled runs' training FLOPs leave out the teacher's forward pass, the same
# 0.68 MFLOP/token for every distilled run.)
RETRO_RUNS = ["retro-dense", "retro-mod", "retro-kl-mod", "grow-dense", "grow-mod"]
SCRATCH_PRED = ["scratch-mod-pred"]


def read_log(name):
    return [json.loads(l) for l in open(os.path.join(RUNS, name, "log.jsonl"))]


def report():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(RESULTS, exist_ok=True)
    tp = json.load(open(os.path.join(RUNS, "throughput.json"))) if os.path.exists(os.path.join(RUNS, "throughput.json")) else {}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    rows = []
    labels = {"scratch-dense": "baseline (dense)", "scratch-mod-aux": "MoD + aux loss",
              "scratch-mod-pred": "MoD + predictor", "retro-dense": "5-layer retrofit dense (session 1)",
              "retro-mod": "5-layer retrofit MoD (session 1)", "retro-kl-mod": "5-layer retrofit MoD, distilled",
              "grow-dense": "grown dense, 9 layers (shipped)", "grow-mod": "grown MoD, 9 layers (shipped)"}
    curves = {}
    for ax, group in zip(axes, (["scratch-dense", "scratch-mod-aux", "scratch-mod-pred"], RETRO_RUNS)):
        for name in group:
            if not os.path.exists(os.path.join(RUNS, name, "log.jsonl")):
                continue
            cfg = ModelConfig.from_json(open(os.path.join(RUNS, name, "config.json")).read())
            fps = train_flops_per_step(cfg)
            log = read_log(name)
            st = np.array([r["step"] + 1 for r in log])
            lm = np.array([r["lm_loss"] for r in log])
            sm = np.convolve(lm, np.ones(10) / 10, mode="valid")
            line, = ax.plot(st[9:] * fps, sm, alpha=0.35, lw=1)
            ve = [(r["step"] + 1, r["val_loss"]) for r in log if "val_loss" in r]
            ax.plot([s * fps for s, _ in ve], [v for _, v in ve], "o-", color=line.get_color(), label=labels[name])
            curves[name] = (np.array([s * fps for s, _ in ve]), np.array([v for _, v in ve]))
        ax.set_xscale("log")
        ax.set_xlabel("training FLOPs (analytic, 3x forward)")
        ax.set_ylabel("loss (nats/token): line = train (10-step mean), dots = val")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_title("from scratch, d=64 5 layers, batch 16x256, same steps")
    axes[1].set_title("from stories260K's weights (retrofit, growth)")
    fig.tight_layout()
    png = os.path.join(RESULTS, "mod_vs_dense_loss_flops.png")
    fig.savefig(png, dpi=110)
    # the table
    out = ["| model | val loss, top-k (eval) | val loss, causal | routing used causally | predictor acc. vs top-k | router (r>0) acc. vs top-k | causal fraction selected (per routed layer) | train samples/s | eval samples/s | train FLOPs/step | total train TFLOP | wall clock |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ["scratch-dense", "scratch-mod-aux", "scratch-mod-pred", *RETRO_RUNS]:
        ap = os.path.join(RUNS, name, "analysis.json")
        if not os.path.exists(ap):
            continue
        a = json.load(open(ap))
        meta = json.load(open(os.path.join(RUNS, name + ".meta.json"))) if os.path.exists(os.path.join(RUNS, name + ".meta.json")) else {}
        steps = len(read_log(name))
        routing = "-" if not a["layers"] else ("predictor" if "causal_predictor_val_loss" in a and name in SCRATCH_PRED else "router")
        if a["layers"] and name in RETRO_RUNS:
            routing = "router / predictor"
        causal = "-" if not a["layers"] else (" / ".join(f"{a['causal_' + r + '_val_loss']:.4f}" for r in routing.split(" / ")))
        pacc = " / ".join(f"{v['predictor_accuracy'] * 100:.1f}%" for v in a["layers"].values() if "predictor_accuracy" in v) or "-"
        racc = " / ".join(f"{v['router_accuracy'] * 100:.1f}%" for v in a["layers"].values()) or "-"
        fr = "-"
        if a["layers"]:
            fr = "; ".join(r + ": " + ", ".join(f"{v:.3f}" for v in a[f"causal_{r}_fraction"].values()) for r in routing.split(" / "))
        t = tp.get(name, {})
        out.append(f"| {labels[name]} | {a['topk_val_loss']:.4f} | {causal} | {routing} | {pacc} | {racc} | {fr} | "
                   f"{t.get('train_samples_per_cpu_s', float('nan')):.2f} | {t.get('eval_samples_per_cpu_s', float('nan')):.1f} | "
                   f"{a['train_flops_per_step'] / 1e9:.2f} G | {a['train_flops_per_step'] * steps / 1e12:.2f} | "
                   f"{meta.get('wall_s', float('nan')):.0f} s |")
    # dense loss at the MoD runs' FLOPs (iso-FLOP view)
    iso = []
    if "scratch-dense" in curves:
        fx, fy = curves["scratch-dense"]
        for name in ["scratch-mod-aux", "scratch-mod-pred"]:
            if name in curves:
                mx, my = curves[name]
                iso.append(f"- {labels[name]} reached val {my[-1]:.4f} at {mx[-1] / 1e12:.2f} TFLOP; the dense baseline at the same FLOPs "
                           f"(interpolated on its val points) was at {np.interp(mx[-1], fx, fy):.4f}.")
    with open(os.path.join(RUNS, "table.md"), "w") as fh:
        fh.write("\n".join(out) + "\n\n" + "\n".join(iso) + "\n")
    print("\n".join(out))
    print("\n".join(iso))
    print("wrote", png, os.path.join(RUNS, "table.md"))


# ---- the Go engine's numbers: convert, perplexity, samples -------------------------

def _sh(cmd, out):
    import subprocess
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    txt = f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}(rc {r.returncode}, {time.time() - t0:.1f} s)\n"
    with open(out, "a") as fh:
        fh.write(txt + "\n")
    print(txt, flush=True)
    return r.stdout + r.stderr


def modrun_eval(name, text=os.path.join(RUNS, "val200k.txt"), what="ppl,gen"):
    """Convert runs/NAME to runs/NAME/model.gguf and score/sample it with bin/modrun;
    everything goes to runs/NAME/modrun.txt."""
    modrun = os.path.join(ROOT, "bin", "modrun")
    d = os.path.join(RUNS, name)
    gguf = os.path.join(d, "model.gguf")
    log = os.path.join(d, "modrun.txt")
    if name == "stories260K":
        gguf = ex.STORIES260K
    elif not os.path.exists(gguf):
        _sh([modrun, "convert", "-i", os.path.join(d, "ckpt.pt"), "-c", os.path.join(d, "config.json"),
             "--vocab", ex.STORIES260K, "-o", gguf], log)
    cfg = json.load(open(os.path.join(d, "config.json"))) if name != "stories260K" else {"routed_layers": []}
    mod = bool(cfg["routed_layers"])
    routings = ["topk", "router", "predictor"] if mod else [None]
    if "ppl" in what:
        for r in routings:
            _sh([modrun, "perplexity", "-m", gguf, "-f", text, "--ctx", "512", "--quiet"] + (["--routing", r] if r else []), log)
    if "gen" in what:
        for r in (["router", "predictor"] if mod else [None]):
            ro = ["--routing", r] if r else []
            _sh([modrun, "-m", gguf, "-p", "Once upon", "-n", "120", "--temp", "0", "--stats"] + ro, log)
            for seed in ("1", "2"):
                _sh([modrun, "-m", gguf, "-p", "Once upon", "-n", "120", "--temp", "0.8", "--seed", seed, "--stats"] + ro, log)
