#!/bin/bash
# The CPU prompt (prefill of 128) and decode (16 tokens) of the types that
# were requantized to Q8_0 at load until session 10 (Q2_K, Q3_K, Q4_1,
# Q5_0, Q5_1), for several modrun binaries round after round, so that
# their ratios hold under load; with LLAMA=1, llama-bench's pp128 on the
# same file in the same round (two threads; it spin-waits, so under load
# its figure says little).
#
#   bench/cpu-lowbit-prompt.sh ROUNDS "FILE.gguf..." MODRUN [MODRUN_BEFORE...]
#
# e.g. go build -o /tmp/modrun ./cmd/modrun &&
#      bench/cpu-lowbit-prompt.sh 5 "/tmp/d2048-q2_k.gguf /tmp/d2048-q3_k_m.gguf" /tmp/modrun /tmp/modrun-before
#
# Each row: the load, then each binary's prefill and decode tok/s (median
# of --repeats 3) and its prefill over the first binary's.
set -euo pipefail
rounds=$1 files=$2
shift 2
llama=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
hdr="| round | file | load"
[ "${LLAMA:-0}" = 1 ] && hdr+=" | llama.cpp pp128"
for b in "$@"; do hdr+=" | $(basename "$b") prefill | decode | prefill / $(basename "$1")'s"; done
echo "$hdr |"
for r in $(seq "$rounds"); do
	for file in $files; do
		row="| $r | $(basename "$file") | $(cut -d' ' -f1 /proc/loadavg)"
		if [ "${LLAMA:-0}" = 1 ]; then
			lp=$("$llama" -m "$file" -p 128 -n 0 -t 2 -r 2 -o json 2>/dev/null |
				python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')
			row+=" | $(printf %.0f "$lp")"
		fi
		first=
		for b in "$@"; do
			read -r mp mt < <("$b" bench -m "$file" --backends cpu --prompt 128 -n 16 --repeats 3 --validate 0 --json 2>/dev/null |
				python3 -c 'import json, sys
r = json.load(sys.stdin)["rows"][0]
print(r["prefill_tokens_per_s"], r["decode_tokens_per_s"])')
			first=${first:-$mp}
			row+=" | $(printf %.0f "$mp") | $(printf %.1f "$mt") | $(echo "$mp $first" | awk '{ printf "%.2f", $1 / $2 }')"
		done
		echo "$row |"
	done
done
