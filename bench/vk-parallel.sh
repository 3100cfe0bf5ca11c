#!/bin/bash
# Issue 33's Vulkan throughput: modrun bench --parallel 1,8 --backends
# vulkan (the step runner, vulkan.Stepper) and, in the same round, the
# runner's own decode step alone (bench --backends vulkan: one sequence,
# matvec kernels, no step runner), on one file, round after round, one
# table row a round. Extra modrun binaries run in the same rounds.
#
#   bench/vk-parallel.sh ROUNDS FILE.gguf MODRUN [MODRUN_BEFORE...]
#
# e.g. go build -o /tmp/modrun ./cmd/modrun &&
#      bench/vk-parallel.sh 3 /tmp/vk-s15m-q8_0.gguf /tmp/modrun
set -euo pipefail
rounds=$1 file=$2
shift 2
hdr="| round | load"
for b in "$@"; do hdr+=" | $(basename "$b") decode step alone | step runner P=1 | P=8 | P=8 / P=1 | P=8 / decode step"; done
echo "$hdr |"
for r in $(seq "$rounds"); do
	row="| $r | $(cut -d' ' -f1 /proc/loadavg)"
	for b in "$@"; do
		alone=$("$b" bench -m "$file" --backends vulkan --prompt 32 -n 64 --repeats 3 --validate 0 --json 2>/dev/null |
			python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["rows"][0]["decode_tokens_per_s"])')
		read -r m1 m8 < <("$b" bench -m "$file" --backends vulkan --parallel 1,8 --prompt 32 -n 64 --repeats 3 --json 2>/dev/null |
			python3 -c 'import json, sys
rows = {r["parallel"]: r["aggregate_decode_tokens_per_s"] for r in json.load(sys.stdin)["rows"]}
print("%.1f %.1f" % (rows[1], rows[8]))')
		row+=" | $alone | $m1 | $m8 | $(echo "$m8 $m1" | awk '{ printf "%.2f", $1 / $2 }') | $(echo "$m8 $alone" | awk '{ printf "%.2f", $1 / $2 }')"
	done
	echo "$row |"
done
