#!/usr/bin/python3
"""Issue 8: the training runs behind models/ and bench/results/mod_vs_dense.*

  /usr/bin/python3 train/experiments.py train grow 1     # shipped models (stories260K grown to 9 layers), 1 thread
  /usr/bin/python3 train/experiments.py train retro-kl 1 # same-shape retrofit, distilled (comparison)
  /usr/bin/python3 train/experiments.py train retro 1    # session 1's models (5-layer retrofit of stories260K)
  /usr/bin/python3 train/experiments.py train scratch 1  # the paper's comparison, from scratch
  /usr/bin/python3 train/experiments.py train retro2 1   # second retrofit pair (not shipped)
  /usr/bin/python3 train/experiments.py train QUEUE 1 RUN   # only one run of a queue
  /usr/bin/python3 train/experiments.py analyze [RUN...|stories260K]  # runs/RUN/analysis.json
  /usr/bin/python3 train/experiments.py throughput 4 3 1 # runs/throughput.json (samples/s)
  /usr/bin/python3 train/experiments.py modrun_eval RUN  # convert + modrun perplexity/samples -> runs/RUN/modrun.txt
  /usr/bin/python3 train/experiments.py report           # bench/results/mod_vs_dense_loss_flops.png, runs/table.md

Each train run is skipped when its log is complete; train.py saves ckpt.pt and resume.pt at every
eval (50 steps) and the queue passes --resume, so a stopped run continues from its last eval. analyze/throughput/report need the same
LD_LIBRARY_PATH (below) only for speed. Runs go to runs/ (git-ignored; MODRUN_RUNS overrides).

Speed: Debian's python3-torch links the reference BLAS (libblas.so.3 from
libblas3, ~3 GFLOP/s). Every run here puts OpenBLAS first on the library path,
without touching the system:
  cd /tmp/ob && apt-get download libopenblas0-pthread && dpkg-deb -x libopenblas0-pthread_*.deb root
  export LD_LIBRARY_PATH=/tmp/ob/root/usr/lib/x86_64-linux-gnu/openblas-pthread
which is 20-40x faster for these matmuls (train.py is unchanged; results agree to float rounding).
"""

import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNS = os.environ.get("MODRUN_RUNS", os.path.join(ROOT, "runs"))
OPENBLAS = os.environ.get("OPENBLAS_DIR", "/tmp/ob/root/usr/lib/x86_64-linux-gnu/openblas-pthread")
STORIES260K = os.path.join(os.path.dirname(ROOT), "shared", "data", "models", "stories260K.gguf")

V1_TRAIN = os.path.join(os.path.dirname(ROOT), "shared", "data", "tinystories", "TinyStories-train.head-2MiB.txt")

# Shapes of stories260K for every run: dim 64, 5 layers, 8 heads / 4 kv heads, ffn 172, vocab 512, tied.
SHAPE = ["--dim", "64", "--layers", "5", "--heads", "8", "--kv-heads", "4", "--ffn", "172"]
COMMON = ["--batch", "16", "--seq-len", "256", "--eval-every", "50", "--val-windows", "64",
          "--log-every", "25", "--seed", "1337"]
MOD = ["--capacity", "0.125", "--routed", "default", "--gate", "sigmoid"]

GROW = ["--init", STORIES260K, "--grow", "--teacher", STORIES260K, "--distill", "0.5", "--steps", "600",
        "--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "20"]

STEPS_RETRO = 400
STEPS_SCRATCH = 400

QUEUES = {
    # Shipped models: retrofit stories260K's weights; routers/predictors start fresh.
    "retro": [
        ("retro-mod", ["--init", STORIES260K, "--steps", str(STEPS_RETRO), "--lr", "1e-3", "--min-lr", "1e-4",
                       "--warmup", "20", *MOD, "--aux-weight", "0.01", "--pred-weight", "0.01"]),
        ("retro-dense", ["--init", STORIES260K, "--steps", str(STEPS_RETRO), "--lr", "1e-3", "--min-lr", "1e-4",
                         "--warmup", "20", "--routed", "dense"]),
    ],
    # Second retrofit pair, after the first showed (a) the causal router under-selecting (aux weight
    # 0.01: 4.3% / 2.4% of tokens at capacity 12.5%) and (b) the dense twin getting WORSE than
    # stories260K itself on the (V1) validation text (1.50 vs 1.43 nats): a 10x aux weight, and
    # only the V1 training text (the distribution stories260K and the validation file come from).
    "retro2": [
        ("retro2-mod", ["--init", STORIES260K, "--steps", str(STEPS_RETRO), "--lr", "1e-3", "--min-lr", "1e-4",
                        "--warmup", "20", *MOD, "--aux-weight", "0.1", "--pred-weight", "0.01",
                        "--train-files", V1_TRAIN]),
        ("retro2-dense", ["--init", STORIES260K, "--steps", str(STEPS_RETRO), "--lr", "1e-3", "--min-lr", "1e-4",
                          "--warmup", "20", "--routed", "dense", "--train-files", V1_TRAIN]),
    ],
    # Session 2, shipped: depth growth. stories260K's 5 blocks at layers 0,2,4,6,8 of a 9-layer model,
    # new identity-initialised blocks at 1,3,5,7 (routed in the MoD model, dense in its twin); the LM
    # loss is half cross-entropy on the data, half KL to stories260K (which keeps the old blocks from
    # drifting on our small data while the new ones learn).
    "grow": [
        ("grow-mod", [*GROW, *MOD, "--aux-weight", "0.01", "--pred-weight", "0.01"]),
        ("grow-dense", [*GROW, "--routed", "dense"]),
    ],
    # Session 2, for comparison: the same-shape (5-layer) retrofit, distilled (pure KL) at lr 3e-3.
    "retro-kl": [
        ("retro-kl-mod", ["--init", STORIES260K, "--teacher", STORIES260K, "--distill", "1", "--steps", "600",
                          "--lr", "3e-3", "--min-lr", "1e-4", "--warmup", "20", *MOD,
                          "--aux-weight", "0.01", "--pred-weight", "0.01"]),
    ],
    # The paper's comparison: same shapes, data, steps, tokens; from scratch.
    "scratch": [
        ("scratch-dense", [*SHAPE, "--steps", str(STEPS_SCRATCH), "--routed", "dense"]),
        # MoD + aux loss: the router is trained with the BCE aux loss (weight 0.01); no predictor.
        ("scratch-mod-aux", [*SHAPE, "--steps", str(STEPS_SCRATCH), *MOD, "--aux-weight", "0.01",
                             "--predictor-hidden", "0"]),
        # MoD + predictor: no aux loss on the router; a predictor MLP (stop-grad input) learns top-k membership.
        ("scratch-mod-pred", [*SHAPE, "--steps", str(STEPS_SCRATCH), *MOD, "--aux-weight", "0",
                              "--pred-weight", "0.01"]),
    ],
}


def env(threads):
    e = dict(os.environ)
    if os.path.isdir(OPENBLAS):
        e["LD_LIBRARY_PATH"] = OPENBLAS + (":" + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
    e["OMP_NUM_THREADS"] = str(threads)
    e["OPENBLAS_NUM_THREADS"] = str(threads)
    return e


def done(out, steps):
    p = os.path.join(out, "log.jsonl")
    if not os.path.exists(p):
        return False
    lines = open(p).read().strip().splitlines()
    return bool(lines) and json.loads(lines[-1])["step"] == steps - 1


def train_queue(name, threads, only=None):
    for run, args in QUEUES[name]:
        if only and run != only:
            continue
        out = os.path.join(RUNS, run)
        steps = int(args[args.index("--steps") + 1])
        if done(out, steps):
            print(f"{run}: done already", flush=True)
            continue
        cmd = ["/usr/bin/python3", os.path.join(HERE, "train.py"), "--out", out, "--threads", str(threads),
               *COMMON, "--resume", *args]
        print("+ " + " ".join(cmd), flush=True)
        t0 = time.time()
        with open(os.path.join(RUNS, run + ".log"), "a") as fh:
            rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env(threads))
        wall = time.time() - t0
        with open(os.path.join(RUNS, run + ".meta.json"), "w") as fh:
            json.dump({"run": run, "cmd": cmd, "rc": rc, "wall_s": round(wall, 1), "threads": threads,
                       "ld_library_path": env(threads).get("LD_LIBRARY_PATH", "")}, fh, indent=1)
        print(f"{run}: rc={rc} wall={wall:.0f}s", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "train":
        train_queue(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1, sys.argv[4] if len(sys.argv) > 4 else None)
    else:
        import experiments_analysis as an  # noqa: E402
        getattr(an, cmd)(*sys.argv[2:])
