#!/bin/bash
# Issue 33's lavapipe side by side: llama.cpp's llama-batched-bench (a
# Vulkan build, a measuring stick built in /tmp, never a dependency) and
# modrun bench --parallel 1,8 --backends vulkan on one file, on the same
# Vulkan device, in the same rounds: 32-token prompts, 64 new tokens a
# sequence, aggregate decode tok/s at 1 and 8 sequences (llama.cpp's
# S_TG: B x 64 tokens over the time of the 64 decode steps).
#
#   bench/vk-parallel-llamacpp.sh ROUNDS FILE.gguf MODRUN LLAMA_BIN_DIR
#
# e.g. (llama.cpp c392e50: cmake -G Ninja -B build-vk -DGGML_VULKAN=ON
#      -DLLAMA_CURL=OFF && ninja -C build-vk llama-batched-bench)
#      bench/vk-parallel-llamacpp.sh 3 /tmp/vk-s15m-q8_0.gguf /tmp/modrun /tmp/llama.cpp/build-vk/bin
set -euo pipefail
rounds=$1 file=$2 modrun=$3 llama=$4
echo "| round | load | llama.cpp B=1 | B=8 | B=8 / B=1 | modrun P=1 | P=8 | P=8 / P=1 | modrun P=8 / llama.cpp B=8 |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
for r in $(seq "$rounds"); do
	load=$(cut -d' ' -f1 /proc/loadavg)
	read -r l1 l8 < <("$llama/llama-batched-bench" -m "$file" -c 4096 -b 2048 -ub 512 -npp 32 -ntg 64 -npl 1,8 -ngl 99 2>/dev/null |
		awk -F'|' '$4 ~ /^ *[0-9]+ *$/ { s[$4 + 0] = $9 + 0 } END { printf "%.1f %.1f\n", s[1], s[8] }')
	read -r m1 m8 < <("$modrun" bench -m "$file" --backends vulkan --parallel 1,8 --prompt 32 -n 64 --repeats 3 --json 2>/dev/null |
		python3 -c 'import json, sys
rows = {r["parallel"]: r["aggregate_decode_tokens_per_s"] for r in json.load(sys.stdin)["rows"]}
print("%.1f %.1f" % (rows[1], rows[8]))')
	echo "| $r | $load | $l1 | $l8 | $(echo "$l8 $l1" | awk '{ printf "%.2f", $1 / $2 }') | $m1 | $m8 | $(echo "$m8 $m1" | awk '{ printf "%.2f", $1 / $2 }') | $(echo "$m8 $l8" | awk '{ printf "%.1f", $1 / $2 }') |"
done
