#!/usr/bin/env bash
# run.sh [--quick] [REPORT.md]: check this machine's Vulkan device with the GPU
# bundle (built by `make gpu-bundle`): first `modrun devices --check` (every
# kernel variant once against the CPU), then the kernel and engine tests, then
# the bench set, and write one Markdown report (default report.md beside this
# script; full logs in logs/). Needs only a Vulkan driver.
#
# --quick (or QUICK=1): what one short lease of a GPU machine can afford
# (aim: under 8 minutes on an H100 or H200). The test binaries run side by
# side (each its own process, so a crash or a lost driver in one cannot hide
# the others, each under a time limit), then, one at a time so that their
# timings do not share the GPU, the kernel benchmarks (GB/s of each matvec,
# TFLOP/s of each matmul, us per call of decode attention, where the test
# binary has them), the bench rows
# the open issues are judged by (1.1B Q8_0 and Q4_K_M, 7B Q8_0 prefill and
# decode, a 5-token prompt at 7B, --parallel 1,8,16 at 1.1B) and a
# per-kernel --profile of a 1.1B decode and of a 512-token prefill (with the
# compute probe's peaks, and each kernel's TFLOP/s and share of its path's
# peak). The full mode runs everything below.
#
#   BENCH_SHAPES  shapes to bench (default: stories260k stories15m tinyllama-1.1b llama2-7b llama3.2-1b)
#   BENCH_TYPES   weight types (default: f16 q8_0 q4_k_m; a type this build's
#                 --type does not list is reported as skipped)
#   BENCH_PROMPT  prompt tokens (default 512, the batched prefill of issue 14;
#                 stories260k, whose context is 512, gets at most 448)
#   BENCH_ARGS    more bench flags (default: -n 64 --repeats 3)
#   BENCH_PARALLEL_SHAPES shapes for the many-sequences rows (default:
#                 stories15m tinyllama-1.1b llama2-7b; Q8_0, dense and MoD twin)
#   BENCH_PARALLEL sequence counts (default 1,4,8,16; issue 33's bench --parallel)
#   TEST_TIMEOUT  each test binary's limit (quick: 5m, full: 20m)
#   BENCH_LIMIT   each bench row's limit in seconds (default 240)
#   QUICK_BENCH=0 --quick runs the tests and nothing after them
#   QUICK_DEADLINE --quick's budget in seconds from its start (default 540):
#                 each step after the tests gets at most what is left, and a
#                 step that would start with under 15 s left is skipped and
#                 named in the report, so the report is complete inside one
#                 device call (the device tool allows 600 s a command)
#   LAYER_DIR     a folder with the Khronos validation layer (its .so and .json):
#                 the test binaries of VALIDATE_PKGS (default: vk shaders) run with it
#   MODRUN_DEVICE the Vulkan device, as for modrun
# A step that fails is reported as failed; the others still run, and the
# exit status is 1 when any failed.
set -uo pipefail
started=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
quick=${QUICK:-0}
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
report=${1:-$here/report.md}
logs=$here/logs
[ -d "$here/shared-data" ] && export MODRUN_SHARED_DATA=$here/shared-data # gpu-bundle.sh's copy
mkdir -p "$logs"
shapes=${BENCH_SHAPES:-stories260k stories15m tinyllama-1.1b llama2-7b llama3.2-1b}
types=${BENCH_TYPES:-f16 q8_0 q4_k_m}
bench_prompt=${BENCH_PROMPT:-512}
bench_args=${BENCH_ARGS:--n 64 --repeats 3}
failed=0
{
  echo "# modrun GPU bundle report, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Commit $(cat "$here/COMMIT"), on $(uname -srm), $(nproc) CPUs."
  echo
  echo "## Devices and the kernel self-check (modrun devices --check)"
  echo
  echo '```'
  "$here/bin/modrun" devices --check 2>&1 || { echo "devices --check: FAILED (exit $?)"; failed=1; }
  echo '```'
  echo
  # What the driver's compiler says of each kernel the profile picks
  # (registers, spills): whether a batched step's matvec spills here
  # (docs/matvec-cost.md, "Registers"). A driver without the statistics
  # is noted, not a failure.
  echo "## Kernel statistics (modrun devices --kernel-stats)"
  echo
  echo '```'
  "$here/bin/modrun" devices --kernel-stats 2>&1 || echo "devices --kernel-stats: exit $? (a driver without VK_KHR_pipeline_executable_properties says so above)"
  echo '```'
  echo
  echo "## Tests"
  echo
  echo "| package | result | passed | failed | skipped |"
  echo "|---|---|--:|--:|--:|"
} > "$report"
# run_tests P NAME SKIP: one test binary in its package's folder, logged.
run_tests() {
  local p=$1 name=$2 skip=$3 layer=
  # The Khronos validation layer (synchronization validation included) for
  # the packages in VALIDATE_PKGS, where LAYER_DIR holds it: its checks slow
  # a test binary several times, so the engine's run without it.
  if [ -n "${LAYER_DIR:-}" ] && [[ " ${VALIDATE_PKGS:-vk shaders} " == *" $p "* ]]; then layer=$LAYER_DIR; fi
  # LD_LIBRARY_PATH too: the layer's manifest names its library without a
  # folder, which the loader looks up as a system library, not beside the
  # manifest (on the H200, VK_LAYER_PATH alone gave VK_ERROR_LAYER_NOT_PRESENT).
  (cd "$here/src/$p" && ${layer:+env VK_LAYER_PATH="$layer" LD_LIBRARY_PATH="$layer${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"} timeout -k 10 "${TEST_TIMEOUT:-$([ "$quick" = 1 ] && echo 5m || echo 20m)}" \
    "$here/tests/$name.test" -test.v -test.count=1 ${skip:+-test.skip "$skip"}) > "$logs/test-$name.log" 2>&1
  echo $? > "$logs/test-$name.rc"
}
# test_row P NAME: the report's row of one test binary's log.
test_row() {
  local p=$1 name=$2 log=$logs/test-$2.log rc pass fail skip result
  rc=$(cat "$logs/test-$name.rc")
  pass=$(grep -c -- '--- PASS' "$log"); fail=$(grep -c -- '--- FAIL' "$log"); skip=$(grep -c -- '--- SKIP' "$log")
  result=ok
  case $rc in 0) ;; 124|137) result="TIMED OUT"; failed=1 ;; *) result="FAIL (exit $rc)"; failed=1 ;; esac
  echo "| $p | $result | $pass | $fail | $skip |" >> "$report"
  echo "run.sh: tests $p: $result ($pass passed, $fail failed, $skip skipped)" >&2
}
if [ "$quick" = 1 ]; then
  while read -r p name skip; do run_tests "$p" "$name" "$skip" & done < "$here/tests/packages.txt"
  wait
else
  while read -r p name skip; do run_tests "$p" "$name" "$skip"; done < "$here/tests/packages.txt"
fi
while read -r p name skip; do test_row "$p" "$name"; done < "$here/tests/packages.txt"
{
  echo
  echo "Every failure and skip, with its reason (subtests included):"
  echo
  echo '```'
  for f in "$logs"/test-*.log; do
    # go test -v prints a test's messages (a skip's reason) before its --- line
    grep -h -B4 -- '--- FAIL\|--- SKIP' "$f" | grep -v '^--$\|^=== \|--- PASS' | sed "s|^|$(basename "$f" .log): |" | head -200
  done
  echo '```'
  echo
} >> "$report"
# limit L: L seconds, or in quick mode what is left of QUICK_DEADLINE if
# that is less; 0 when under 15 s are left (the step is then skipped).
limit() {
  local l=$1 left
  if [ "$quick" = 1 ]; then
    left=$(( ${QUICK_DEADLINE:-540} - ($(date +%s) - started) ))
    [ "$left" -lt 15 ] && { echo 0; return; }
    [ "$left" -lt "$l" ] && l=$left
  fi
  echo "$l"
}
# skipped NAME: a step the quick mode's deadline left no time for.
skipped() {
  echo "run.sh: $1: skipped (QUICK_DEADLINE ${QUICK_DEADLINE:-540} s reached)" >&2
  { echo "### $1: skipped: the quick mode's deadline (QUICK_DEADLINE=${QUICK_DEADLINE:-540} s) was reached"; echo; } >> "$report"
}
# bench_row NAME ARGS...: one modrun bench into the report (its Markdown),
# or the failure and the end of its log.
bench_row() {
  local name=$1 rc lim
  shift
  lim=$(limit "${BENCH_LIMIT:-240}")
  [ "$lim" = 0 ] && { skipped "bench $name"; return; }
  timeout -k 5 "$lim" "$here/bin/modrun" bench "$@" --out "$logs/bench-$name.md" --json-out "$logs/bench-$name.json" > /dev/null 2> "$logs/bench-$name.log"
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "run.sh: bench $name: ok" >&2
    sed -e '1s/^# .*/### '"$name"'/' "$logs/bench-$name.md" >> "$report"
  else
    failed=1
    local why="FAILED (exit $rc)"
    [ $rc -eq 124 ] && why="cut at its limit of $lim s (exit 124)"
    echo "run.sh: bench $name: $why" >&2
    { echo "### $name: $why"; echo; echo '```'; tail -5 "$logs/bench-$name.log"; echo '```'; } >> "$report"
  fi
  echo >> "$report"
}
if [ "$quick" = 1 ] && [ "${QUICK_BENCH:-1}" = 0 ]; then # tests only
  echo "run.sh: report in $report" >&2
  exit $failed
fi
if [ "$quick" = 1 ]; then
  { echo "## Bench rows (quick)"; echo; } >> "$report"
  small=${QUICK_SMALL:-tinyllama-1.1b} large=${QUICK_LARGE:-llama2-7b} # other shapes: a try-out on lavapipe
  m11=$logs/$small-q8_0.gguf # bench --save writes the dense model here (the twin beside it, -mod)
  [ "$small" = stories260k ] && { echo "run.sh: --quick needs a context over 512 (stories260k has 512)" >&2; exit 2; }
  # kernel_bench NAME FILTER BENCHTIME LIMIT [LOG]: one benchmark of
  # shaders.test, its -test.bench filter narrowed to what a quick run can
  # afford, logged to kernels-LOG.log (LOG defaults to NAME).
  kernel_bench() {
    local lim
    lim=$(limit "$4")
    [ "$lim" = 0 ] && { echo "$1: skipped: the quick mode's deadline (QUICK_DEADLINE) was reached" >> "$report"; return; }
    set -- "$1" "$2" "$3" "$lim" "${5:-$1}"
    if ! (cd "$here/src/shaders" && "$here/tests/shaders.test" -test.list "^$1\$" 2>/dev/null | grep -q "^$1\$"); then
      echo "this build's shaders.test has no $1" >> "$report"
      return
    fi
    (cd "$here/src/shaders" && timeout -k 10 "$4" "$here/tests/shaders.test" -test.run '^$' -test.bench "$2" -test.benchtime "$3") \
      > "$logs/kernels-${5:-$1}.log" 2>&1 || { echo "$1: FAILED or cut at ${4}s (exit $?)" >> "$report"; failed=1; }
    grep -E '^Benchmark|FAIL|panic|SKIP|--- |probe' "$logs/kernels-${5:-$1}.log" >> "$report"
  }
  # ref_row WHEN: one kernel row that every GPU runs, timed before the
  # bench rows and again after the kernel benchmarks: the H200's runs A and
  # B differed 2x on the same kernels, and a drift between the two rows
  # says the clocks or a co-tenant moved during this run.
  ref_row() {
    { echo "## Reference row ($1): the same kernel at both ends of the run"; echo; echo '```'; } >> "$report"
    kernel_bench BenchmarkMatmulGPU 'BenchmarkMatmulGPU/^tiled-64x64$/^F16$/^n512/4096x4096$' 10x 30 "ref-$1"
    { echo '```'; echo; } >> "$report"
  }
  ref_row before
  bench_row "$small-q8_0" --synthetic "$small" --type q8_0 --capacity 0.125 --routing router --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 8 --save "$logs/m.gguf"
  mv "$logs/m-$small-q8_0.gguf" "$m11" 2>/dev/null; rm -f "$logs/m-$small-q8_0-mod.gguf"
  # The tensor-core matmul: the default (hilo, f32's precision) above; the
  # f16-operand kernel and none, for what each costs, same file. Without
  # tensor cores the f32 tiles: the pipelined tile (the default), then the
  # tiles before it (MODRUN_MATMUL_PIPE=0).
  MODRUN_TENSOR_CORES=f16 bench_row "$small-q8_0-tensor-cores-f16" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  MODRUN_TENSOR_CORES=0 bench_row "$small-q8_0-no-tensor-cores" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  MODRUN_TENSOR_CORES=0 MODRUN_MATMUL_PIPE=0 bench_row "$small-q8_0-no-tensor-cores-no-pipe" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  bench_row "$small-q4_k_m" --synthetic "$small" --type q4_k_m --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 8
  bench_row "parallel-$small-q8_0" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1
  # The same with every step of 2+ rows on the matmul's narrow, split tiles
  # instead of one matvec pass of up to 16 vectors: which is cheaper at 8
  # and 16 rows is this row against the one above.
  MODRUN_VEC_ROWS=1 bench_row "parallel-$small-q8_0-vec-rows-1" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1
  m7=$logs/large-$large-q8_0.gguf
  bench_row "$large-q8_0" --synthetic "$large" --type q8_0 --backends vulkan --prompt 512 -n 32 --repeats 2 --validate 0 --save "$m7"
  bench_row "$large-q8_0-prompt5" -m "$m7" --backends vulkan --prompt 5 -n 16 --repeats 3 --validate 0
  # The same prompt as one batched prefill (the few-row split tiles) in
  # place of five decode steps: which is sooner to the first token.
  MODRUN_PROMPT_STEPS=1 bench_row "$large-q8_0-prompt5-prefill" -m "$m7" --backends vulkan --prompt 5 -n 16 --repeats 3 --validate 0
  rm -f "$m7"
  {
    echo "## Kernel benchmarks (shaders.test: GB/s of the matvecs, TFLOP/s of the matmuls, us/call of decode and prefill attention, validated first)"
    echo
    echo '```'
  } >> "$report"
  kernel_bench BenchmarkMatvecGPU "${QUICK_MATVEC:-BenchmarkMatvecGPU/^7b-(gateup-swiglu|qkv-norm)\$/^(F16|Q8_0|Q4_K)\$}" 30x 90
  kernel_bench BenchmarkMatmulGPU "${QUICK_MATMUL:-BenchmarkMatmulGPU/^(tiled-64x64|pipe-128x64|split-pipe-128x64|pipe-128x128|coop-64x64|coop-hilo-64x64|coop-pk-64x64|coop-hilo-pk-64x64|coop-16x64-k64)\$/}" 10x 90
  # decode attention, decode_attend against decode_attend_keys at contexts 70, 512, 4096 (issue 42 item 5)
  kernel_bench BenchmarkDecodeAttendGPU "${QUICK_ATTEND:-BenchmarkDecodeAttendGPU}" 50x 60
  # a 512-token prefill's attention, one invocation a query row against 2-8 lanes a row (issue 43 item 4)
  kernel_bench BenchmarkPrefillAttentionGPU "${QUICK_PREFILL_ATTN:-BenchmarkPrefillAttentionGPU}" 20x 60
  { echo '```'; echo; } >> "$report"
  ref_row after
  {
    echo "## Where a $small Q8_0 decode's GPU time goes (modrun run --profile, 64 tokens)"
    echo
    echo '```'
    lim=$(limit 60)
    if [ "$lim" = 0 ]; then echo "skipped: the quick mode's deadline (QUICK_DEADLINE) was reached"; else
      timeout -k 5 "$lim" "$here/bin/modrun" run -m "$m11" -p "Once upon a time" -n 64 --backend vulkan --profile 2>&1 >/dev/null | tail -40
    fi
    echo '```'
    echo
  } >> "$report"
  # A prefill's profile: a prompt of 512 tokens with BOS (the synthetic
  # models' vocabulary has a token per byte: 510 bytes; --stats prints the
  # count) in one batch, one token generated. The profile's first line is
  # the compute probe's peaks; each kernel's TFLOP/s and share of its
  # path's peak follow.
  for _ in $(seq 40); do printf 'Once upon a time there was a little girl named Lily. '; done | head -c 510 > "$logs/prompt-512.txt"
  {
    echo "## Where a $small Q8_0 prefill's GPU time goes (modrun run --profile --stats, a 512-token prompt, 1 token)"
    echo
    echo '```'
    lim=$(limit 60)
    if [ "$lim" = 0 ]; then echo "skipped: the quick mode's deadline (QUICK_DEADLINE) was reached"; else
      timeout -k 5 "$lim" "$here/bin/modrun" run -m "$m11" -f "$logs/prompt-512.txt" -n 1 --backend vulkan --stats --profile 2>&1 >/dev/null | tail -40
    fi
    echo '```'
  } >> "$report"
  rm -f "$m11"
  echo "run.sh: report in $report" >&2
  exit $failed
fi
{
  echo "## Bench: each shape, dense and its MoD twin at capacity 0.125, on Vulkan"
  echo
} >> "$report"
bench_help=$("$here/bin/modrun" bench -h 2>&1)
for shape in $shapes; do
  for typ in $types; do
    name=$shape-$typ
    if ! grep -qiw -- "$typ" <<< "$bench_help"; then
      echo "run.sh: bench $name: skipped (this build's --type has no $typ)" >&2
      { echo "### $name: skipped: this build's \`bench --type\` has no $typ"; echo; } >> "$report"
      continue
    fi
    prompt=$bench_prompt
    [ "$shape" = stories260k ] && [ "$prompt" -gt 448 ] && prompt=448 # its context is 512
    # shellcheck disable=SC2086
    bench_row "$name" --synthetic "$shape" --type "$typ" --capacity 0.125 --backends vulkan --prompt "$prompt" $bench_args
  done
done
{
  echo "## Bench --parallel: many sequences sharing steps on Vulkan (vulkan.Stepper)"
  echo
} >> "$report"
for shape in ${BENCH_PARALLEL_SHAPES:-stories15m tinyllama-1.1b llama2-7b}; do
  bench_row "parallel-$shape-q8_0" --synthetic "$shape" --type q8_0 --capacity 0.125 --backends vulkan \
    --parallel "${BENCH_PARALLEL:-1,4,8,16}" --prompt 32 -n 64 --repeats 3
done
echo "run.sh: report in $report" >&2
exit $failed
