#!/bin/bash
# Issue 35's NLL criterion by KL divergence: each file of shared/data/quant
# against its F32 twin, under modrun's CPU backend and under llama.cpp's
# CPU, on the very token positions llama-perplexity scores (the second half
# of each window of CTX), and the two engines against each other
# (engine/llamakld_test.go prints the figures; results in
# bench/results/cpu-quant-nll-vs-llamacpp.md).
#
#   bench/cpu-quant-kld.sh [KV [TYPE...]]     KV: f32 (default) or f16, llama.cpp's KV cache
#
# Work files go to $KLD_DIR (default /tmp/kld-bench): the F32 twins
# (llama-quantize --allow-requantize FILE twin F32), llama-perplexity's
# --kl-divergence-base files and its --kl-divergence logs, and llama.cpp's
# float32 logits (bench/llamacpp-logits.cpp, built here against the CPU
# build in $LLAMA, default /tmp/llama.cpp). One thread each, niced:
# llama.cpp's threads spin-wait.
set -euo pipefail
kv=${1:-f32}
shift || true
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K Q4_1 Q5_0 Q5_1)
llama=${LLAMA:-/tmp/llama.cpp}
dir=${KLD_DIR:-/tmp/kld-bench}
ctx=${CTX:-256}
root=$(cd "$(dirname "$0")/.." && pwd)
quant=$root/../shared/data/quant
mkdir -p "$dir"
head -c 32768 "$root/../shared/data/tinystories/TinyStories-validation.head-hf.txt" >"$dir/text32k.txt"
[ -x "$dir/llamacpp-logits" ] || nice -n 19 g++ -O2 -std=c++17 -I"$llama/include" -I"$llama/ggml/include" \
	"$root/bench/llamacpp-logits.cpp" -L"$llama/build/bin" -lllama -lggml -lggml-base \
	-Wl,-rpath,"$llama/build/bin" -o "$dir/llamacpp-logits"
ppl() { nice -n 19 "$llama/build/bin/llama-perplexity" -c "$ctx" -b "$ctx" -t 1 -ctk "$kv" -ctv "$kv" "$@"; }
for t in "${types[@]}"; do
	file=$quant/kq-$t.gguf twin=$dir/twin-$t.gguf base=$dir/base-$t-$kv.kld
	[ -f "$twin" ] || "$llama/build/bin/llama-quantize" --allow-requantize "$file" "$twin" F32 >/dev/null 2>&1
	ppl -m "$twin" -f "$dir/text32k.txt" --kl-divergence-base "$base" >"$dir/base-$t-$kv.log" 2>&1
	ppl -m "$file" --kl-divergence-base "$base" --kl-divergence >"$dir/kld-$t-$kv.log" 2>&1
	nice -n 19 "$dir/llamacpp-logits" "$twin" "$base" "$dir/l-twin-$t-$kv.f32" "$kv" >/dev/null 2>&1
	nice -n 19 "$dir/llamacpp-logits" "$file" "$base" "$dir/l-file-$t-$kv.f32" "$kv" >/dev/null 2>&1
	echo "== kq-$t, llama.cpp KV $kv; llama-perplexity --kl-divergence printed:"
	grep -E "Mean ln\(PPL|Mean    KLD|Same top p:|RMS Δp" "$dir/kld-$t-$kv.log"
	(cd "$root" && MODRUN_LLAMA_KLD="$file $twin $base $dir/l-file-$t-$kv.f32 $dir/l-twin-$t-$kv.f32 ${BACKEND:-cpu}" \
		GOMAXPROCS=1 nice -n 19 go test -tags llamakld ./bench/ -run TestLlamaKLD -v -count=1 -timeout 30m |
		grep -E "KL|ok|FAIL" | sed 's/^ *llamakld_test.go:[0-9]*: //')
done
