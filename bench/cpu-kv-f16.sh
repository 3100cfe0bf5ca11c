#!/bin/bash
# The CPU backend's decode at a long context with an F16 KV cache against
# an F32 one, interleaved round by round (the order alternates), on one
# file: bench/cpu-kv-f16.sh ROUNDS FILE.gguf [MODRUN] [PROMPT] [N] [CTX]
# (defaults: bin/modrun, 896 prompt tokens, 64 decoded, --ctx 1024). Each
# row is validated once first (16 tokens against the reference), then timed
# with --validate 0. Prints each round's decode and prefill tokens/s and
# the medians with the f16/f32 ratio (bench/results/cpu-kv-f16.md).
set -euo pipefail
rounds=${1:?rounds}
file=${2:?file.gguf}
modrun=${3:-bin/modrun}
prompt=${4:-896}
n=${5:-64}
ctx=${6:-1024}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for kv in f32 f16; do
	"$modrun" bench -m "$file" --backends cpu --kv-type "$kv" --ctx "$ctx" --prompt "$prompt" -n 16 --repeats 1 --validate 16 --json >"$out/validate-$kv.json" 2>/dev/null
done
for r in $(seq 1 "$rounds"); do
	order="f32 f16"
	if ((r % 2 == 0)); then order="f16 f32"; fi
	for kv in $order; do
		"$modrun" bench -m "$file" --backends cpu --kv-type "$kv" --ctx "$ctx" --prompt "$prompt" -n "$n" --repeats 1 --validate 0 --json >"$out/$r-$kv.json" 2>/dev/null
	done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for kv in ("f32", "f16"):
    v = json.load(open(f"{out}/validate-{kv}.json"))["rows"][0]
    print(f"validated {kv}: {v['validate_tokens']} tokens, tolerance {v['validation_tolerance']!r}, kv_type {v['kv_type']}")
dec = {"f32": [], "f16": []}
pre = {"f32": [], "f16": []}
for r in range(1, rounds + 1):
    line = []
    for kv in ("f32", "f16"):
        row = json.load(open(f"{out}/{r}-{kv}.json"))["rows"][0]
        assert row["kv_type"] == kv, row["kv_type"]
        dec[kv].append(row["decode_tokens_per_s"])
        pre[kv].append(row["prefill_tokens_per_s"])
        line.append(f"{kv} decode {row['decode_tokens_per_s']:.1f} prefill {row['prefill_tokens_per_s']:.1f}")
    print(f"round {r}: " + ", ".join(line) + f", decode f16/f32 {dec['f16'][-1] / dec['f32'][-1]:.3f}")
ratios = [b / a for a, b in zip(dec["f32"], dec["f16"])]
for kv in ("f32", "f16"):
    print(f"{kv}: decode median {statistics.median(dec[kv]):.1f} (range {min(dec[kv]):.1f}-{max(dec[kv]):.1f}), prefill median {statistics.median(pre[kv]):.1f}")
print(f"decode f16/f32: median of round ratios {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})")
PY
