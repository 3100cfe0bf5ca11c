#!/bin/bash
# Issue 35's K-quant prompt and decode side by side: llama-bench (pp128,
# tg32) and modrun bench (prefill of 128, decode of 32) on one file, two
# threads each, round after round, one table row a round. Extra modrun
# binaries (say, main before a change) run in the same rounds, so their
# ratios hold under load.
#
#   bench/cpu-kquant-prompt.sh ROUNDS FILE.gguf MODRUN [MODRUN_BEFORE...]
#
# e.g. go build -o /tmp/modrun ./cmd/modrun &&
#      bench/cpu-kquant-prompt.sh 5 /tmp/d2048-q4_k_m.gguf /tmp/modrun
#
# llama.cpp's CPU build on an AMX machine runs its prompt (more than one
# token) on AMX tiles from a repacked copy of the weights; its log says
# "AMX model buffer size" (llama-bench -v).
set -euo pipefail
rounds=$1 file=$2
shift 2
llama=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
hdr="| round | load | llama.cpp pp128 | tg32"
for b in "$@"; do hdr+=" | $(basename "$b") prefill | x llama.cpp | decode | x llama.cpp"; done
echo "$hdr |"
for r in $(seq "$rounds"); do
	load=$(cut -d' ' -f1 /proc/loadavg)
	read -r lp lt < <("$llama" -m "$file" -p 128 -n 32 -t 2 -r 2 -o json 2>/dev/null |
		python3 -c 'import json, sys
t = {("p" if r["n_prompt"] else "t"): r["avg_ts"] for r in json.load(sys.stdin)}
print(t["p"], t["t"])')
	row="| $r | $load | $(printf %.0f "$lp") | $(printf %.1f "$lt")"
	for b in "$@"; do
		read -r mp mt < <("$b" bench -m "$file" --backends cpu --prompt 128 -n 32 --repeats 2 --validate 0 --json 2>/dev/null |
			python3 -c 'import json, sys
r = json.load(sys.stdin)["rows"][0]
print(r["prefill_tokens_per_s"], r["decode_tokens_per_s"])')
		row+=" | $(printf %.0f "$mp") | $(echo "$mp $lp" | awk '{ printf "%.2f", $1 / $2 }') | $(printf %.1f "$mt") | $(echo "$mt $lt" | awk '{ printf "%.2f", $1 / $2 }')"
	done
	echo "$row |"
done
