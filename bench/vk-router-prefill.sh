#!/bin/sh
# The router model's prefill on Vulkan, before and after issue 32
# (bench/results/lavapipe-issue32-before-after.md, "Run 4"): BEFORE and AFTER
# are two modrun binaries; ROUNDS rounds alternate which runs first. Every
# bench row validates first (the default --validate 16), which also records
# and warms the prompt chunk before the timed runs: with --validate 0 the
# first timed run records the chunk too, and its prefill is slower.
# Usage: bench/vk-router-prefill.sh BEFORE AFTER [ROUNDS]
set -eu
before=$1 after=$2 rounds=${3:-5}
model=models/tinystories-mod.gguf
prompt="Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine with her dog Max. One day, Lily and Max went to the park to play."
# 1. The kernels the prefill dispatches, with their call counts (run --profile, -n 1: the prompt and its head only).
for v in before after; do
	eval bin=\$$v
	"$bin" run -m $model --backend vulkan --routing router -p "$prompt" -n 1 --profile 2>&1 >/dev/null |
		sed -n '/^kernel/,/^GPU total/p' | awk 'NF==5 {print $1, $2}' | sort >"/tmp/vk-router-prefill-$v.calls"
done
if diff /tmp/vk-router-prefill-before.calls /tmp/vk-router-prefill-after.calls >/dev/null; then
	echo "kernel calls: identical ($(awk '{n+=$2} END {print n}' /tmp/vk-router-prefill-after.calls) dispatches)"
else
	echo "kernel calls differ:"; diff /tmp/vk-router-prefill-before.calls /tmp/vk-router-prefill-after.calls || true
fi
# 2. The bench rows, before and after interleaved.
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
	for v in $order; do
		eval bin=\$$v
		"$bin" bench -m /tmp/vk-s15m-q8_0.gguf -m $model --backends vulkan --prompt 64 -n 128 --repeats 3 2>/dev/null |
			awk -F'|' -v v=$v -v r=$r '$2 ~ /gguf/ {gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $5); gsub(/ /, "", $8); print "round", r, v, $2, $3, "prefill", $5, "decode", $8}'
	done
done
