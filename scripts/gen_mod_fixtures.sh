#!/usr/bin/env bash
# gen_mod_fixtures.sh: regenerate the MoD golden fixtures (testdata/mod/) and
# the convert test inputs (testdata/convert/, with the public MoD layouts'
# checkpoints and golden outputs in its subdirectories) from the PyTorch reference in
# train/. Needs Debian's python3-torch and python3-numpy, and ../shared/data
# (stories260K.gguf for the vocabulary and the retrofit; TinyStories for the
# briefly trained model). Takes ~10 minutes on 2 cores (the training run).
#   scripts/gen_mod_fixtures.sh [--only NAME,...] [--train-steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/modrun ./cmd/modrun
/usr/bin/python3 train/fixtures.py --modrun bin/modrun "$@"
/usr/bin/python3 train/public_fixtures.py  # the public MoD layouts: testdata/convert/*/
ls -l testdata/mod testdata/convert
