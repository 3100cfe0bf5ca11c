#!/bin/bash
# Issue 33's CPU throughput side by side: llama-batched-bench and modrun
# bench --parallel at 1 and 8 sequences on one file, two threads each,
# round after round, printing one table row a round (aggregate decode
# tok/s). Extra modrun binaries (say, main before a change) run in the
# same rounds, so their ratios hold under load.
#
#   bench/cpu-parallel.sh ROUNDS FILE.gguf MODRUN [MODRUN_BEFORE...]
#
# LLAMA=0 leaves llama.cpp out (under load its two threads stall).
#
# e.g. go build -o /tmp/modrun ./cmd/modrun &&
#      bench/cpu-parallel.sh 5 /tmp/batch-s15m-q8_0.gguf /tmp/modrun
set -euo pipefail
rounds=$1 file=$2
shift 2
llama=${LLAMA_BATCHED_BENCH:-/tmp/llama.cpp/build/bin/llama-batched-bench}
hdr="| round | load | llama.cpp B=1 | B=8 | x"
for b in "$@"; do hdr+=" | $(basename "$b") P=1 | P=8 | x | P=8 / llama.cpp"; done
echo "$hdr |"
for r in $(seq "$rounds"); do
	load=$(cut -d' ' -f1 /proc/loadavg)
	# llama-batched-bench's table: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
	l1=0 l8=0
	[ "${LLAMA:-1}" = 0 ] || read -r l1 l8 < <("$llama" -m "$file" -c 2048 -b 512 -ub 512 -npp 32 -ntg 64 -npl 1,8 -t 2 2>/dev/null |
		awk -F'|' '$2 ~ /^ *32 *$/ { gsub(/ /, "", $9); tg[$4+0] = $9 } END { print tg[1], tg[8] }')
	row="| $r | $load | $l1 | $l8 | $(echo "$l8 $l1" | awk '{ printf "%.2f", $2 ? $1 / $2 : 0 }')"
	for b in "$@"; do
		read -r m1 m8 < <("$b" bench -m "$file" --backends cpu --parallel 1,8 --prompt 32 -n 64 --repeats 3 --json 2>/dev/null |
			python3 -c 'import json, sys
rows = {r["parallel"]: r["aggregate_decode_tokens_per_s"] for r in json.load(sys.stdin)["rows"]}
print("%.0f %.0f" % (rows[1], rows[8]))')
		row+=" | $m1 | $m8 | $(echo "$m8 $m1" | awk '{ printf "%.2f", $1 / $2 }') | $(echo "$m8 $l8" | awk '{ printf "%.2f", $2 ? $1 / $2 : 0 }')"
	done
	echo "$row |"
done
