#!/usr/bin/python3
"""Train a MoD Llama (or its dense baseline) on TinyStories.

Text is tokenized by the Go tokenizer (`bin/modrun tokenize --sep`: one process
a file, each story on its own with BOS), so Python and Go agree by construction;
ids are cached in --cache (default ~/.cache/modrun/train, or $XDG_CACHE_HOME's),
by a hash of the text and the vocabulary, so a second run starts at once. Validation uses TinyStories-validation.head-hf.txt only, never for
training.

  /usr/bin/python3 train/train.py --out runs/mod --steps 2000           # from scratch
  /usr/bin/python3 train/train.py --out runs/retro \\
      --init models/stories260K.gguf --steps 500                         # retrofit routers
  /usr/bin/python3 train/train.py --out runs/spm --spm-vocab 4096       # own SentencePiece vocab

The vocabulary is stories260K.gguf's 512 tokens unless --vocab names another
GGUF or --spm-vocab N trains a SentencePiece BPE vocabulary of N tokens on the
train files (spm_vocab.py; cached by a hash of its settings and inputs).

Writes OUT/ckpt.pt (state_dict), OUT/config.json (ModelConfig), OUT/log.jsonl,
and OUT/vocab.json, which names the vocabulary GGUF (an --spm-vocab one is
copied to OUT/vocab.gguf). Convert with the GGUF it names:
  bin/modrun convert -i OUT/ckpt.pt --vocab VOCAB.gguf -o OUT/model.gguf
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_io import GGUFFile  # noqa: E402
from modllama import MoDLlama, ModelConfig, config_from_gguf, grow_interleaved, load_dense_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("MODRUN_SHARED_DATA", os.path.join(os.path.dirname(ROOT), "shared", "data"))
TRAIN_FILES = [
    os.path.join(DATA, "tinystories", "TinyStories-train.head-2MiB.txt"),
    os.path.join(DATA, "tinystories", "TinyStoriesV2-GPT4-train.head-1727stories.txt"),
]
VAL_FILE = os.path.join(DATA, "tinystories", "TinyStories-validation.head-hf.txt")
VOCAB = os.path.join(ROOT, "models", "stories260K.gguf")  # shipped with the repository


# ---- data -------------------------------------------------------------------

def split_stories(text, path):
    """Stories: split on "<|endoftext|>" lines, or on blank lines for the
    validation file (which has no separators: paragraph breaks split a story,
    which only shortens the validation windows)."""
    if "<|endoftext|>" in text:
        parts = text.split("<|endoftext|>")
    else:
        parts = text.split("\n\n")
    return [p.strip() for p in parts if p.strip()]


def tokenize_file(path, vocab, modrun, cache_dir):
    """All stories of a text file as one uint16 array, each story BOS-first,
    tokenized by `modrun tokenize`; cached by content hash."""
    with open(path, "rb") as fh:
        raw = fh.read()
    with open(vocab, "rb") as fh:
        key = hashlib.sha256(raw + fh.read()).hexdigest()[:16]
    out = os.path.join(cache_dir, f"{os.path.basename(path)}.{key}.ids.bin")
    if os.path.exists(out):
        return np.fromfile(out, dtype="<u2")
    stories = split_stories(raw.decode("utf-8"), path)

    # One modrun process for the whole file: the stories go in separated by
    # ASCII's record separator, and each is tokenized on its own, BOS-first
    # (a process a story took minutes for a few thousand stories).
    sep = "\x1e"
    if any(sep in s for s in stories):
        raise ValueError(f"{path}: a story holds the record separator U+001E")
    print(f"tokenizing {path}: {len(stories)} stories ...", flush=True)
    r = subprocess.run([modrun, "tokenize", "-m", vocab, "--bos", "--sep", sep], input=sep.join(stories).encode(),
                       capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{modrun} tokenize failed on {path}: {r.stderr.decode().strip()}")
    arr = np.array([int(t) for t in r.stdout.split()], dtype="<u2")
    os.makedirs(cache_dir, exist_ok=True)
    arr.tofile(out + ".tmp")
    os.replace(out + ".tmp", out)
    print(f"tokenized {path}: {len(stories)} stories, {len(arr)} tokens -> {out}", flush=True)
    return arr


def batches(ids, batch, seq_len, gen):
    """Random windows of seq_len+1 tokens: (inputs, targets) [batch, seq_len]."""
    n = len(ids) - seq_len - 1
    if n <= 0:
        raise ValueError(f"{len(ids)} tokens is too few for seq_len {seq_len}")
    data = torch.from_numpy(ids.astype(np.int64))
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        w = torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])
        yield w[:, :-1], w[:, 1:]


def val_windows(ids, seq_len, count):
    """Fixed, non-overlapping validation windows (the first `count`)."""
    data = torch.from_numpy(ids.astype(np.int64))
    n = min(count, (len(ids) - 1) // seq_len)
    w = torch.stack([data[i * seq_len:i * seq_len + seq_len + 1] for i in range(n)])
    return w[:, :-1], w[:, 1:]


# ---- vocabulary -------------------------------------------------------------

VOCAB_FORMAT = "modrun-train-vocab/1"


def resolve_vocab(a):
    """Settle a.vocab (the GGUF that tokenizes) and a.vocab_size (the model's):
    --spm-vocab N trains or reuses a SentencePiece vocabulary; --vocab-size
    defaults to the vocabulary's token count. Idempotent."""
    if getattr(a, "vocab_resolved", False):
        return a.vocab
    if a.spm_vocab:
        if a.vocab != VOCAB:
            raise ValueError("--spm-vocab and --vocab both name a vocabulary; give one")
        if a.init != "scratch":
            raise ValueError(f"--spm-vocab needs --init scratch: {a.init} has its own vocabulary")
        if not 259 < a.spm_vocab <= 1 << 16:
            raise ValueError(f"--spm-vocab {a.spm_vocab}: want 260..65536 (259 specials and bytes, uint16 ids)")
        if os.path.abspath(a.val_file) in map(os.path.abspath, a.train_files):
            raise ValueError(f"{a.val_file} is the validation file; never train a vocabulary on it")
        import spm_vocab  # needs python3-sentencepiece, which only this option does
        a.vocab = spm_vocab.cached(a.train_files, a.cache, spm_vocab.settings(a.spm_vocab))
        if a.vocab_size not in (None, a.spm_vocab):
            raise ValueError(f"--vocab-size {a.vocab_size} differs from --spm-vocab {a.spm_vocab}")
    if a.vocab_size is None:
        a.vocab_size = len(GGUFFile(a.vocab).kv["tokenizer.ggml.tokens"])
    a.vocab_resolved = True
    return a.vocab


def save_vocab_choice(a, out_dir):
    """OUT/vocab.json: which GGUF tokenized the data, for `modrun convert
    --vocab`. (Not in config.json: modrun convert reads that strictly and
    rejects unknown fields.) An --spm-vocab GGUF lives in the cache, so a
    copy goes beside the checkpoint. Training on pre-tokenized --train-ids
    needs no vocabulary: when the GGUF is absent, vocab.json says so and
    convert needs a --vocab from the user."""
    path = os.path.abspath(a.vocab)
    if a.train_ids and not a.spm_vocab and not os.path.exists(a.vocab):
        path = None
        rec = {"format": VOCAB_FORMAT, "gguf": None, "sha256": None,
               "source": f"absent: {os.path.abspath(a.vocab)} (trained on --train-ids {a.train_ids})"}
    else:
        if a.spm_vocab:
            path = os.path.join(os.path.abspath(out_dir), "vocab.gguf")
            shutil.copyfile(a.vocab, path)
        with open(a.vocab, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        rec = {"format": VOCAB_FORMAT, "gguf": path, "sha256": digest,
               "source": f"spm-bpe-{a.spm_vocab}" if a.spm_vocab else ("stories260K" if a.vocab == VOCAB else "file")}
        if a.spm_vocab:
            rec["spm_cache"] = os.path.dirname(os.path.abspath(a.vocab))
    with open(os.path.join(out_dir, "vocab.json"), "w") as fh:
        json.dump(rec, fh, indent=2)
        fh.write("\n")
    return path


# ---- model ------------------------------------------------------------------

def build_model(a):
    """From scratch, or retrofit: a dense GGUF's weights with routers added."""
    routed = None if a.routed == "default" else ([] if a.routed == "dense" else [int(i) for i in a.routed.split(",")])
    common = dict(routed_layers=routed, capacity=a.capacity, gate=a.gate, router_bias=a.router_bias,
                  predictor_hidden=a.predictor_hidden, aux_loss_weight=a.aux_weight,
                  predictor_loss_weight=a.pred_weight, max_seq_len=max(a.seq_len, 512))
    if a.init == "scratch":
        cfg = ModelConfig(dim=a.dim, n_layers=a.layers, n_heads=a.heads, n_kv_heads=a.kv_heads,
                          vocab_size=a.vocab_size, ffn_dim=a.ffn, tied_output=not a.untied,
                          rope_base=a.rope_base, **common)
        return MoDLlama(cfg).init_weights(seed=a.seed, router_std=a.router_std)
    g = GGUFFile(a.init)
    if a.grow:
        n = int(g.kv[f"{g.kv.get('general.architecture', 'llama')}.block_count"])
        cfg = config_from_gguf(g, n_layers=2 * n - 1, **common)
        return grow_interleaved(MoDLlama(cfg).init_weights(seed=a.seed, router_std=a.router_std), g)
    cfg = config_from_gguf(g, **common)
    m = MoDLlama(cfg).init_weights(seed=a.seed, router_std=a.router_std)
    return load_dense_gguf(m, g)


def lr_at(step, a):
    """Linear warmup, then cosine decay to min_lr."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * min(1.0, t)))


@torch.no_grad()
def evaluate(model, vx, vy, device, bs=16):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(vx), bs):
        out = model(vx[i:i + bs].to(device), vy[i:i + bs].to(device))
        tot += float(out["lm_loss"]) * len(vx[i:i + bs])
        n += len(vx[i:i + bs])
    model.train()
    return tot / max(1, n)


def save(model, out_dir, opt=None, step=None, gen=None):
    """OUT/ckpt.pt and OUT/config.json; with opt, also OUT/resume.pt (the
    optimiser, the next step and the data generator's state) for --resume.
    Each file is written beside and renamed, so a stop never leaves half a file."""
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    torch.save(sd, os.path.join(out_dir, "ckpt.pt.tmp"))
    os.replace(os.path.join(out_dir, "ckpt.pt.tmp"), os.path.join(out_dir, "ckpt.pt"))
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        fh.write(model.cfg.to_json() + "\n")
    if opt is not None:
        state = {"step": step, "opt": opt.state_dict(), "gen": gen.get_state(), "torch_rng": torch.get_rng_state()}
        torch.save(state, os.path.join(out_dir, "resume.pt.tmp"))
        os.replace(os.path.join(out_dir, "resume.pt.tmp"), os.path.join(out_dir, "resume.pt"))


def load_teacher(a, device):
    """The frozen model whose next-token distribution --distill trains
    towards (a GGUF, or a run folder with ckpt.pt and config.json; same
    vocabulary), or None."""
    if not a.teacher:
        return None
    from modllama import model_from_gguf
    if os.path.isdir(a.teacher):
        with open(os.path.join(a.teacher, "config.json")) as fh:
            t = MoDLlama(ModelConfig.from_json(fh.read()))
        t.load_state_dict(torch.load(os.path.join(a.teacher, "ckpt.pt")))
    else:
        t = model_from_gguf(GGUFFile(a.teacher))
    t = t.to(device).eval()
    for p in t.parameters():
        p.requires_grad_(False)
    return t


def distill_loss(logits, teacher_logits):
    """KL(teacher || student) per token, averaged: the teacher's whole
    distribution as the target instead of the one observed token."""
    lt = F.log_softmax(teacher_logits.float(), dim=-1)
    ls = F.log_softmax(logits.float(), dim=-1)
    return (lt.exp() * (lt - ls)).sum(-1).mean()


def train(a, model=None, log=print):
    """Run the training loop; returns (model, list of log records)."""
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    resolve_vocab(a)
    if a.train_ids:
        tr = np.fromfile(a.train_ids, dtype="<u2")
    else:
        tr = np.concatenate([tokenize_file(p, a.vocab, a.modrun, a.cache) for p in a.train_files])
    va = np.fromfile(a.val_ids, dtype="<u2") if a.val_ids else tokenize_file(a.val_file, a.vocab, a.modrun, a.cache)
    model = (model or build_model(a)).to(device)
    if int(tr.max()) >= model.cfg.vocab_size:
        raise ValueError(f"token id {int(tr.max())} >= vocab_size {model.cfg.vocab_size}")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(a.seed)
    start = 0
    resume = os.path.join(a.out, "resume.pt") if a.out else None
    if a.resume and resume and os.path.exists(resume):
        st = torch.load(resume)
        model.load_state_dict(torch.load(os.path.join(a.out, "ckpt.pt")))
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        torch.set_rng_state(st["torch_rng"])
        start = st["step"]
        log(f"resumed {a.out} at step {start}")
    teacher = load_teacher(a, device)
    if teacher is not None and teacher.cfg.vocab_size != model.cfg.vocab_size:
        raise ValueError(f"--teacher {a.teacher}: vocab {teacher.cfg.vocab_size}, model {model.cfg.vocab_size}")
    it = batches(tr, a.batch, a.seq_len, gen)
    vx, vy = val_windows(va, a.seq_len, a.val_windows)
    records = []
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        a.vocab_gguf = save_vocab_choice(a, a.out)
    logf = None
    if a.out:
        logf = open(os.path.join(a.out, "log.jsonl"), "a" if start else "w")
    t0 = time.time()
    if start and a.out:
        with open(os.path.join(a.out, "log.jsonl")) as fh:
            done = [json.loads(l) for l in fh if l.strip()]
        t0 = time.time() - (done[-1]["time_s"] if done else 0.0)
    model.train()
    for step in range(start, a.steps):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, a)
        x, y = next(it)
        x, y = x.to(device), y.to(device)
        out = model(x, y)
        loss = out["loss"]
        rec = {"step": step}
        if teacher is not None:
            with torch.no_grad():
                tl = teacher(x)["logits"]
            kl = distill_loss(out["logits"], tl)
            loss = loss + a.distill * (kl - out["lm_loss"])
            rec["kl"] = float(kl)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        rec.update({"loss": float(loss), "lm_loss": float(out["lm_loss"]),
                    "aux_loss": float(out["aux_loss"]), "pred_loss": float(out["pred_loss"]),
                    "lr": lr_at(step, a), "time_s": round(time.time() - t0, 2)})
        if (a.eval_every and (step + 1) % a.eval_every == 0) or step == a.steps - 1:
            rec["val_loss"] = evaluate(model, vx, vy, device)
            if a.out:
                save(model, a.out, opt, step + 1, gen)
        records.append(rec)
        if logf:
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
        if step % a.log_every == 0 or "val_loss" in rec:
            log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()))
        if a.stop_after and step + 1 == a.stop_after and step + 1 < a.steps:
            if a.out and "val_loss" not in rec:
                save(model, a.out, opt, step + 1, gen)
            log(f"stopped after step {step + 1} of {a.steps}; continue with --resume")
            break
    if logf:
        logf.close()
    return model.cpu(), records


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="output folder: ckpt.pt, config.json, log.jsonl, vocab.json")
    p.add_argument("--init", default="scratch", help="'scratch' or a dense llama GGUF to retrofit")
    p.add_argument("--grow", action="store_true",
                   help="with --init GGUF of L blocks: a 2L-1 layer model, the GGUF's blocks at the even layers "
                        "and new identity-initialised blocks at the odd (routed) ones")
    p.add_argument("--vocab", default=VOCAB, help="GGUF whose tokenizer encodes the text")
    p.add_argument("--spm-vocab", type=int, default=0, metavar="N",
                   help="train (or reuse from --cache) an N-token SentencePiece BPE vocabulary on the train files")
    p.add_argument("--modrun", default=os.path.join(ROOT, "bin", "modrun"))
    p.add_argument("--train-files", nargs="+", default=TRAIN_FILES)
    p.add_argument("--val-file", default=VAL_FILE)
    p.add_argument("--train-ids", help="pre-tokenized uint16 ids instead of --train-files")
    p.add_argument("--val-ids", help="pre-tokenized uint16 ids instead of --val-file")
    p.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "modrun", "train"),
                   help="where tokenized ids are cached")
    # model (scratch)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=172)
    p.add_argument("--vocab-size", type=int, help="default: the vocabulary's token count")
    p.add_argument("--rope-base", type=float, default=10000.0)
    p.add_argument("--untied", action="store_true", help="a separate output matrix")
    # MoD
    p.add_argument("--routed", default="default", help="'default' (1,3,5,..), 'dense', or a list '1,3'")
    p.add_argument("--capacity", type=float, default=0.125)
    p.add_argument("--gate", choices=["sigmoid", "identity"], default="sigmoid")
    p.add_argument("--router-bias", action="store_true")
    p.add_argument("--router-std", type=float, default=0.02)
    p.add_argument("--predictor-hidden", type=int, default=-1, help="-1: dim/2, 0: none")
    p.add_argument("--aux-weight", type=float, default=0.01)
    p.add_argument("--pred-weight", type=float, default=0.01)
    # optimisation
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--val-windows", type=int, default=64)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--teacher", help="a GGUF or a run folder (same vocabulary) to distil from, with --distill")
    p.add_argument("--distill", type=float, default=1.0,
                   help="with --teacher: the LM loss is (1-D)*cross-entropy + D*KL(teacher || student)")
    p.add_argument("--stop-after", type=int, default=0, metavar="N",
                   help="stop (with a checkpoint) after step N of --steps' schedule")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/resume.pt (written at every eval) when it exists")
    p.add_argument("--device", default="", help="cpu or cuda (default: cuda when available)")
    return p


def main(argv=None):
    try:
        run(argv)
    except KeyboardInterrupt:
        # Ctrl-C ends a run without a traceback; checkpoints written at each
        # eval stay (--resume continues from OUT/resume.pt).
        print("\ntrain.py: interrupted", file=sys.stderr)
        sys.exit(130)


def run(argv):
    a = parser().parse_args(argv)
    if not a.out:
        parser().error("--out is required")
    try:
        resolve_vocab(a)
    except ValueError as e:
        parser().error(str(e))
    train(a)
    print(f"wrote {a.out}/ckpt.pt, {a.out}/config.json and {a.out}/vocab.json")
    print(f"convert with: {os.path.relpath(a.modrun)} convert -i {a.out}/ckpt.pt --vocab {a.vocab_gguf or 'VOCAB.gguf'} -o {a.out}/model.gguf")


if __name__ == "__main__":
    main()
