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
#   QUICK_TESTS=0 --quick runs no test binary (devices --check still runs):
#                 the whole deadline for the rows and benchmarks, the tests
#                 in a call of their own (QUICK_BENCH=0)
#   QUICK_DEADLINE --quick's budget in seconds from its start (default 540):
#                 each step after the tests gets at most what is left, and a
#                 step that would start with under 15 s left is skipped and
#                 named in the report, so the report is complete inside one
#                 device call (the device tool allows 600 s a command)
#   LAYER_DIR     a folder with the Khronos validation layer (its .so and .json):
#                 the test binaries of VALIDATE_PKGS (default: vk shaders) run with it
#   MODRUN_DEVICE the Vulkan device, as for modrun
#   MODRUN_SRC    where the tests' fixtures are when the bundle has no src/
#                 (the packed bundle, DIR.tar.xz): a checkout of the
#                 repository, by default the folder run.sh is started from
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
# Every row runs the engine's defaults and the knobs it names: a tuning
# file on this machine (modrun tune) must not change them. The quick
# mode's tune step writes its own, to logs/tuning.json.
export MODRUN_TUNING=off
# Each test binary runs in its package's folder of src: the bundle's copy
# of the fixtures, or, in the packed bundle (which leaves it out), a
# checkout of the repository, which holds them at the same paths.
src=$here/src
if [ ! -d "$src" ]; then
  src=${MODRUN_SRC:-$PWD}
  if [ ! -d "$src/testdata" ] || ! grep -qs '^module github.com/modrun/modrun$' "$src/go.mod"; then
    echo "run.sh: $here has no src/ (a packed bundle) and $src is not a checkout of modrun: start run.sh in one, or set MODRUN_SRC" >&2
    exit 2
  fi
fi
mkdir -p "$logs"
# An earlier run's figures must not stand in for a step this one skips.
rm -f "$logs"/times.md "$logs"/bench-* "$logs"/llama-* "$logs"/kernels-*
shapes=${BENCH_SHAPES:-stories260k stories15m tinyllama-1.1b llama2-7b llama3.2-1b}
types=${BENCH_TYPES:-f16 q8_0 q4_k_m}
bench_prompt=${BENCH_PROMPT:-512}
bench_args=${BENCH_ARGS:--n 64 --repeats 3}
failed=0
{
  echo "# modrun GPU bundle report, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Commit $(cat "$here/COMMIT"), on $(uname -srm), $(nproc) CPUs; the tests' fixtures from $src."
  echo
  echo "## Devices and the kernel self-check (modrun devices --check)"
  echo
  echo '```'
  "$here/bin/modrun" devices --check 2>&1 || { echo "devices --check: FAILED (exit $?)"; failed=1; }
  echo '```'
  echo
  # The opt-in kernels on this device (the decode step's hand-off variants,
  # the direct tensor-core matmul's product, the prefill's attention on
  # tensor cores): checked with the rest, so a failure here is theirs (the
  # knobs are off by default).
  echo "## The same with the opt-in kernels (MODRUN_HANDOFF=1 MODRUN_MATMUL_DIRECT=1 MODRUN_ATTENTION_COOP=1 modrun devices --check)"
  echo
  echo '```'
  MODRUN_HANDOFF=1 MODRUN_MATMUL_DIRECT=1 MODRUN_ATTENTION_COOP=1 "$here/bin/modrun" devices --check 2>&1 || echo "devices --check with the opt-in kernels: FAILED (exit $?)"
  echo '```'
  echo
  # The decode kernels modrun tune may pick instead of the defaults
  # (matvec.comp's subgroup matvec, decode_attend): checked the same way.
  echo "## The same with the other decode kernels (MODRUN_MATVEC_ROWS=0 MODRUN_ATTEND_KEYS=0 modrun devices --check)"
  echo
  echo '```'
  MODRUN_MATVEC_ROWS=0 MODRUN_ATTEND_KEYS=0 "$here/bin/modrun" devices --check 2>&1 || echo "devices --check with the other decode kernels: FAILED (exit $?)"
  echo '```'
  echo
  # What the driver's compiler says of each kernel the profile picks
  # (registers, spills): whether a batched step's matvec spills here
  # (docs/matvec-cost.md, "Registers"). A driver without the statistics
  # is noted, not a failure.
  echo "## Kernel statistics (MODRUN_HANDOFF=1 MODRUN_MATMUL_DIRECT=1 MODRUN_ATTENTION_COOP=1 modrun devices --kernel-stats: the opt-in kernels too)"
  echo
  echo '```'
  MODRUN_HANDOFF=1 MODRUN_MATMUL_DIRECT=1 MODRUN_ATTENTION_COOP=1 "$here/bin/modrun" devices --kernel-stats 2>&1 || echo "devices --kernel-stats: exit $? (a driver without VK_KHR_pipeline_executable_properties says so above)"
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
  (cd "$src/$p" && ${layer:+env VK_LAYER_PATH="$layer" LD_LIBRARY_PATH="$layer${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"} timeout -k 10 "${TEST_TIMEOUT:-$([ "$quick" = 1 ] && echo 5m || echo 20m)}" \
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
if [ "$quick" = 1 ] && [ "${QUICK_TESTS:-1}" = 0 ]; then
  { echo "| (not run: QUICK_TESTS=0; QUICK_BENCH=0 runs them alone) | | | | |"; echo; } >> "$report"
  rm -f "$logs"/test-*
  echo "| devices --check and --kernel-stats (no tests) | $(( $(date +%s) - started )) |" >> "$logs/times.md"
else
  if [ "$quick" = 1 ]; then
    while read -r p name skip; do run_tests "$p" "$name" "$skip" & done < "$here/tests/packages.txt"
    wait
  else
    while read -r p name skip; do run_tests "$p" "$name" "$skip"; done < "$here/tests/packages.txt"
  fi
  while read -r p name skip; do test_row "$p" "$name"; done < "$here/tests/packages.txt"
  echo "| devices --check, --kernel-stats and the tests | $(( $(date +%s) - started )) |" >> "$logs/times.md"
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
fi
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
# took NAME T0: the seconds since T0 that step NAME took, for the report's
# last table (what each step costs, to size the next run's deadline).
took() { echo "| $1 | $(( $(date +%s) - $2 )) |" >> "$logs/times.md"; }
# bench_row NAME ARGS...: one modrun bench into the report (its Markdown),
# or the failure and the end of its log.
bench_row() {
  local name=$1 rc lim t0
  t0=$(date +%s)
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
  took "bench $name" "$t0"
}
# jnum FILE KEY [N]: the Nth (default 1st) number under KEY in a JSON or
# JSON-lines FILE (modrun bench --json-out, llama-bench -oe jsonl); empty
# when absent. The files' keys are unique enough for it: no JSON parser
# on a machine that has only a Vulkan driver.
jnum() {
  [ -f "$1" ] || return 0
  grep -o "\"$2\": *-\?[0-9][0-9.e+-]*" "$1" | sed -n "${3:-1}p" | sed 's/.*: *//'
}
# llama_ts FILE PROMPT GEN: llama-bench's avg tokens/s of the test with
# n_prompt PROMPT and n_gen GEN in its jsonl FILE.
llama_ts() {
  [ -f "$1" ] || return 0
  grep "\"n_prompt\": $2, \"n_gen\": $3," "$1" | grep -o '"avg_ts": [0-9.e+-]*' | head -1 | sed 's/.*: //'
}
# llama_stg FILE B: llama-batched-bench's S_TG (aggregate decode tok/s) at B sequences.
llama_stg() {
  [ -f "$1" ] || return 0
  awk -F'|' -v b="$2" '$4 ~ /^ *[0-9]+ *$/ && $4 + 0 == b { print $9 + 0; exit }' "$1"
}
# The quick mode's summary: each of issue 42's and 43's accepted figures,
# as this run measured it, beside llama.cpp's where the bundle has it. The
# absolute goals are the issues' H200 figures; on another GPU only the
# ratios are the test.
acceptance() {
  local d=$logs/bench-$small-q8_0.json q4=$logs/bench-$small-q4_k_m.json l=$logs/bench-$lq8.json
  local p=$logs/bench-parallel-$small-q8_0.json p5=$logs/bench-$lq8-prompt5.json nt=$logs/bench-$small-q8_0-no-tensor-cores.json
  local ld=$logs/llama-$small-q8_0.jsonl lq=$logs/llama-$small-q4_k_m.jsonl ll=$logs/llama-$lq8.jsonl lb=$logs/llama-batched-$small-q8_0.md
  local dec pre dec4 pre4 dec7 pre7 gb7 probe7 ttft ttft8 f0 f1 pmod a1 a8 a16 pre_nt hdec hdec4 hdec7 hgb7 dpre dpre7 dpmod dpres
  dec=$(jnum "$d" decode_tokens_per_s); pre=$(jnum "$d" prefill_tokens_per_s)
  pmod=$(jnum "$d" prefill_tokens_per_s 2); f0=$(jnum "$d" prefill_flops_per_token); f1=$(jnum "$d" prefill_flops_per_token 2)
  dec4=$(jnum "$q4" decode_tokens_per_s); pre4=$(jnum "$q4" prefill_tokens_per_s)
  dec7=$(jnum "$l" decode_tokens_per_s); pre7=$(jnum "$l" prefill_tokens_per_s)
  gb7=$(jnum "$l" effective_gbps); probe7=$(jnum "$l" read_gbps)
  ttft=$(jnum "$p5" prefill_tokens_per_s); ttft8=$(jnum "$logs/bench-$lq8-prompt5-steps.json" prefill_tokens_per_s)
  local ttftt; ttftt=$(jnum "$logs/bench-$lq8-prompt5-tiles.json" prefill_tokens_per_s)
  pre_nt=$(jnum "$nt" prefill_tokens_per_s)
  hdec=$(jnum "$logs/bench-$small-q8_0-handoff.json" decode_tokens_per_s); hdec4=$(jnum "$logs/bench-$small-q4_k_m-handoff.json" decode_tokens_per_s)
  hdec7=$(jnum "$logs/bench-$lq8-handoff.json" decode_tokens_per_s); hgb7=$(jnum "$logs/bench-$lq8-handoff.json" effective_gbps)
  local ddec ddec7 dgb7
  ddec=$(jnum "$logs/bench-$small-q8_0-dot.json" decode_tokens_per_s); ddec7=$(jnum "$logs/bench-$lq8-dot.json" decode_tokens_per_s)
  dgb7=$(jnum "$logs/bench-$lq8-dot.json" effective_gbps)
  local ddec4; ddec4=$(jnum "$logs/bench-$small-q4_k_m-dot.json" decode_tokens_per_s)
  local cdec; cdec=$(jnum "$logs/bench-$small-q8_0-no-chain.json" decode_tokens_per_s)
  local tdec; tdec=$(jnum "$logs/bench-$small-q8_0-temp1.json" decode_tokens_per_s)
  local pdec; pdec=$(jnum "$logs/bench-$small-q8_0-temp1-top-p.json" decode_tokens_per_s)
  local mdec; mdec=$(jnum "$logs/bench-$small-q8_0-temp1-min-p.json" decode_tokens_per_s)
  local kdec; kdec=$(jnum "$logs/bench-$small-q8_0-temp1-top-k.json" decode_tokens_per_s)
  local rdec; rdec=$(jnum "$logs/bench-$small-q8_0-temp1-penalty.json" decode_tokens_per_s)
  # Where the temperature-1 rows drew (the row's sampled_on_device: a GPU
  # profile's head draws, lavapipe's own does not).
  local where="on the host"
  grep -q '"sampled_on_device": *true' "$logs/bench-$small-q8_0-temp1.json" 2>/dev/null && where="on the device"
  dpre=$(jnum "$logs/bench-$small-q8_0-direct.json" prefill_tokens_per_s); dpre7=$(jnum "$logs/bench-$lq8-direct.json" prefill_tokens_per_s)
  dpmod=$(jnum "$logs/bench-$small-q8_0-mod-direct.json" prefill_tokens_per_s)
  dpres=$(jnum "$logs/bench-$small-q8_0-direct-resident.json" prefill_tokens_per_s)
  local apre apre7 p2k ap2k
  apre=$(jnum "$logs/bench-$small-q8_0-attn-coop.json" prefill_tokens_per_s); apre7=$(jnum "$logs/bench-$lq8-attn-coop.json" prefill_tokens_per_s)
  p2k=$(jnum "$logs/bench-$small-q8_0-plong.json" prefill_tokens_per_s); ap2k=$(jnum "$logs/bench-$small-q8_0-plong-attn-coop.json" prefill_tokens_per_s)
  a1=$(jnum "$p" aggregate_decode_tokens_per_s 1); a8=$(jnum "$p" aggregate_decode_tokens_per_s 2); a16=$(jnum "$p" aggregate_decode_tokens_per_s 3)
  local ts16; ts16=$(jnum "$logs/bench-parallel-$small-q8_0-temp1.json" aggregate_decode_tokens_per_s 3)
  local d8 d16; d8=$(jnum "$logs/bench-parallel-$small-q8_0-dot.json" aggregate_decode_tokens_per_s 2)
  d16=$(jnum "$logs/bench-parallel-$small-q8_0-dot.json" aggregate_decode_tokens_per_s 3)
  local nc8 nc16; nc8=$(jnum "$logs/bench-parallel-$small-q8_0-no-chain.json" aggregate_decode_tokens_per_s 2)
  nc16=$(jnum "$logs/bench-parallel-$small-q8_0-no-chain.json" aggregate_decode_tokens_per_s 3)
  # row GOAL WHAT MODRUN LLAMA TEST [-]: one line; TEST is an awk condition
  # on m (modrun's figure) and l (llama.cpp's); the verdict is "-" when a
  # figure it needs is missing. A sixth argument "-": the two figures are
  # each engine's own ratio, not to be divided.
  row() {
    local verdict=-
    if [ -z "$5" ]; then verdict="(no goal: the figures beside each other)"
    elif [ -n "$3" ] && { [ -n "$4" ] || [[ "$5" != *l* ]]; }; then
      verdict=$(awk -v m="$3" -v l="${4:-0}" "BEGIN { print (($5) ? \"met\" : \"NOT met\") }")
    fi
    printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$(awk -v v="$3" 'BEGIN { if (v == "") print "-"; else printf "%.4g", v }')" \
      "$(awk -v v="$4" 'BEGIN { if (v == "") print "-"; else printf "%.4g", v }')" \
      "$(awk -v m="$3" -v l="$4" -v x="${6:-}" 'BEGIN { if (x == "-" || m == "" || l == "" || l == 0) print "-"; else printf "%.2fx", m / l }')" "$verdict"
  }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print ""; else print a / b }'; }
  echo "## Acceptance figures (issues 42 and 43), from this run's rows above"
  echo
  echo "The absolute goals are the issues' H200 figures (on an H100 only the ratios are the test); llama.cpp's"
  echo "column is empty when the bundle was built without LLAMA_CPP_BIN. Prefill and decode in tok/s."
  echo
  echo "| issue: goal | figure | modrun | llama.cpp | modrun / llama.cpp | verdict |"
  echo "|---|---|--:|--:|--:|---|"
  row "42: 1.1B Q8_0 decode >= 1,500 (H200)" "$small Q8_0 decode" "$dec" "$(llama_ts "$ld" 0 128)" 'm >= 1500'
  row "42: 7B Q8_0 decode >= 60% of the probe" "$large Q8_0 decode share of the probe" "$(ratio "$gb7" "$probe7")" "" 'm >= 0.6'
  row "42: 7B Q8_0 decode >= 375 (H200)" "$large Q8_0 decode" "$dec7" "$(llama_ts "$ll" 0 128)" 'm >= 375'
  row "42: Q4_K_M decode >= Q8_0's" "$small Q4_K_M decode / Q8_0's" "$(ratio "$dec4" "$dec")" "" 'm >= 1'
  row "42: 8 sequences >= 5x one" "$small Q8_0 aggregate at 8 / at 1" "$(ratio "$a8" "$a1")" "$(ratio "$(llama_stg "$lb" 8)" "$(llama_stg "$lb" 1)")" 'm >= 5' -
  row "(beside it)" "$small Q8_0 aggregate decode at 8 sequences" "$a8" "$(llama_stg "$lb" 8)" ''
  row "42: 16 sequences >= 8x one" "$small Q8_0 aggregate at 16 / at 1" "$(ratio "$a16" "$a1")" "$(ratio "$(llama_stg "$lb" 16)" "$(llama_stg "$lb" 1)")" 'm >= 8' -
  row "(beside it)" "$small Q8_0 aggregate decode at 16 sequences" "$a16" "$(llama_stg "$lb" 16)" ''
  row "(dot)" "$small Q8_0 aggregate at 8 sequences, MODRUN_MATVEC_DOT=1 / the default" "$(ratio "$d8" "$a8")" "" ''
  row "(dot)" "$small Q8_0 aggregate at 16 sequences, MODRUN_MATVEC_DOT=1 / the default" "$(ratio "$d16" "$a16")" "" ''
  row "(batched chain)" "$small Q8_0 aggregate at 8 sequences, chained / MODRUN_CHAIN=1 ($(awk -v r="$nc8" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$a8" "$nc8")" "" ''
  row "(batched chain)" "$small Q8_0 aggregate at 16 sequences, chained / MODRUN_CHAIN=1 ($(awk -v r="$nc16" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$a16" "$nc16")" "" ''
  row "(sampled)" "$small Q8_0 aggregate at 16 sequences, temperature 1 (drawn $where) / greedy ($(awk -v r="$ts16" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$ts16" "$a16")" "" ''
  row "42 (hand-off): 1.1B Q8_0 decode >= 1,500 (H200)" "$small Q8_0 decode, MODRUN_HANDOFF=1 (x$(awk -v a="$hdec" -v b="$dec" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default)" "$hdec" "$(llama_ts "$ld" 0 128)" 'm >= 1500'
  row "42 (hand-off): 7B Q8_0 decode >= 375 (H200)" "$large Q8_0 decode, MODRUN_HANDOFF=1 (x$(awk -v a="$hdec7" -v b="$dec7" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default; $(awk -v a="$hgb7" -v b="$probe7" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.0f%%", 100 * a / b }') of the probe)" "$hdec7" "$(llama_ts "$ll" 0 128)" 'm >= 375'
  row "42 (dot): 1.1B Q8_0 decode >= 1,500 (H200)" "$small Q8_0 decode, MODRUN_MATVEC_DOT=1 (x$(awk -v a="$ddec" -v b="$dec" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default)" "$ddec" "$(llama_ts "$ld" 0 128)" 'm >= 1500'
  row "42 (dot): 7B Q8_0 decode >= 375 (H200)" "$large Q8_0 decode, MODRUN_MATVEC_DOT=1 (x$(awk -v a="$ddec7" -v b="$dec7" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default; $(awk -v a="$dgb7" -v b="$probe7" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.0f%%", 100 * a / b }') of the probe)" "$ddec7" "$(llama_ts "$ll" 0 128)" 'm >= 375'
  row "42 (dot): Q4_K_M decode >= Q8_0's" "$small Q4_K_M / Q8_0 decode, both MODRUN_MATVEC_DOT=1 (Q4_K_M x$(awk -v a="$ddec4" -v b="$dec4" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') its default)" "$(ratio "$ddec4" "$ddec")" "" 'm >= 1'
  row "(beside it)" "$small Q4_K_M decode, MODRUN_MATVEC_DOT=1" "$ddec4" "$(llama_ts "$lq" 0 128)" ''
  row "42 (chain): the default's 4 greedy steps a submission against 1" "$small Q8_0 decode, default / MODRUN_CHAIN=1 ($(awk -v r="$cdec" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$dec" "$cdec")" "" ''
  row "(sampled)" "$small Q8_0 decode at temperature 1, drawn $where / greedy ($(awk -v r="$tdec" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$tdec" "$dec")" "" ''
  row "(sampled)" "$small Q8_0 decode at temperature 1, top-p 0.95, drawn $where / greedy ($(awk -v r="$pdec" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$pdec" "$dec")" "" ''
  row "(sampled)" "$small Q8_0 decode at temperature 1, min-p 0.05, drawn $where / greedy ($(awk -v r="$mdec" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$mdec" "$dec")" "" ''
  row "(sampled)" "$small Q8_0 decode at temperature 1, top-k 40, drawn $where / greedy ($(awk -v r="$kdec" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$kdec" "$dec")" "" ''
  row "(sampled)" "$small Q8_0 decode at temperature 1, repeat penalty 1.1, drawn on the host / greedy ($(awk -v r="$rdec" 'BEGIN { if (r == "") print "-"; else printf "%.1f", r }') tok/s)" "$(ratio "$rdec" "$dec")" "" ''
  row "42 (hand-off): Q4_K_M decode >= Q8_0's" "$small Q4_K_M / Q8_0 decode, both MODRUN_HANDOFF=1" "$(ratio "$hdec4" "$hdec")" "" 'm >= 1'
  row "42: 5-token prompt at 7B: first token < 50 ms" "ms to the first token (default, one matvec pass; MODRUN_PROMPT_STEPS=8, five decode steps: $(awk -v r="$ttft8" 'BEGIN { if (r == "") print "-"; else printf "%.1f", 5000 / r }'); MODRUN_PROMPT_STEPS=1 MODRUN_VEC_ROWS=1, the split tiles: $(awk -v r="$ttftt" 'BEGIN { if (r == "") print "-"; else printf "%.1f", 5000 / r }'))" "$(awk -v r="$ttft" 'BEGIN { if (r != "") print 5000 / r }')" "" 'm < 50'
  row "43: 1.1B Q8_0 pp512 >= 41,000 (H200) and >= 1.5x" "$small Q8_0 prefill 512" "$pre" "$(llama_ts "$ld" 512 0)" 'm >= 41000 && m >= 1.5 * l'
  row "43: 1.1B Q4_K_M pp512 >= 1.5x" "$small Q4_K_M prefill 512" "$pre4" "$(llama_ts "$lq" 512 0)" 'm >= 1.5 * l'
  row "43: 7B Q8_0 pp512 >= 10,000 (H200) and >= 1.5x" "$large Q8_0 prefill 512" "$pre7" "$(llama_ts "$ll" 512 0)" 'm >= 10000 && m >= 1.5 * l'
  row "43 (direct): 1.1B Q8_0 pp512 >= 41,000 (H200) and >= 1.5x" "$small Q8_0 prefill 512, MODRUN_MATMUL_DIRECT=1 (x$(awk -v a="$dpre" -v b="$pre" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default)" "$dpre" "$(llama_ts "$ld" 512 0)" 'm >= 41000 && m >= 1.5 * l'
  row "43 (direct, resident): 1.1B Q8_0 pp512 >= 41,000 (H200) and >= 1.5x" "$small Q8_0 prefill 512, MODRUN_MATMUL_DIRECT=resident (x$(awk -v a="$dpres" -v b="$dpre" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') MODRUN_MATMUL_DIRECT=1)" "$dpres" "$(llama_ts "$ld" 512 0)" 'm >= 41000 && m >= 1.5 * l'
  row "43 (direct): 7B Q8_0 pp512 >= 10,000 (H200) and >= 1.5x" "$large Q8_0 prefill 512, MODRUN_MATMUL_DIRECT=1 (x$(awk -v a="$dpre7" -v b="$pre7" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default)" "$dpre7" "$(llama_ts "$ll" 512 0)" 'm >= 10000 && m >= 1.5 * l'
  row "43: MoD twin prefill >= 90% of its ideal" "twin's speed-up over dense / ideal ($(awk -v a="$f0" -v b="$f1" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a / b }'))" \
    "$(ratio "$(ratio "$pmod" "$pre")" "$(ratio "$f0" "$f1")")" "" 'm >= 0.9'
  row "43 (direct): MoD twin prefill >= 90% of its ideal" "twin's speed-up over dense / ideal, both MODRUN_MATMUL_DIRECT=1 (twin $(awk -v v="$dpmod" 'BEGIN { if (v == "") print "-"; else printf "%.0f", v }') tok/s)" \
    "$(ratio "$(ratio "$dpmod" "$dpre")" "$(ratio "$f0" "$f1")")" "" 'm >= 0.9'
  row "43 (attention on tensor cores): 1.1B Q8_0 pp512 >= 41,000 (H200) and >= 1.5x" "$small Q8_0 prefill 512, MODRUN_ATTENTION_COOP=1 (x$(awk -v a="$apre" -v b="$pre" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default)" "$apre" "$(llama_ts "$ld" 512 0)" 'm >= 41000 && m >= 1.5 * l'
  row "43 (attention on tensor cores): 7B Q8_0 pp512 >= 10,000 (H200) and >= 1.5x" "$large Q8_0 prefill 512, MODRUN_ATTENTION_COOP=1 (x$(awk -v a="$apre7" -v b="$pre7" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }') the default)" "$apre7" "$(llama_ts "$ll" 512 0)" 'm >= 10000 && m >= 1.5 * l'
  row "43 item 4: a long prompt's prefill" "$small Q8_0 prefill of ${long:-?} tokens, MODRUN_ATTENTION_COOP=1 / the default ($(awk -v v="$p2k" 'BEGIN { if (v == "") print "-"; else printf "%.0f", v }') tok/s)" "$(ratio "$ap2k" "$p2k")" "" ''
  row "43: without tensor cores >= 1.0x" "$small Q8_0 prefill 512, MODRUN_TENSOR_CORES=0" "$pre_nt" "$(llama_ts "$ld" 512 0)" 'm >= l'
  row "43: 16 rows no slower than 8" "$small Q8_0 aggregate at 16 / at 8" "$(ratio "$a16" "$a8")" "" 'm >= 1'
  echo
}
if [ "$quick" = 1 ] && [ "${QUICK_BENCH:-1}" = 0 ]; then # tests only
  echo "run.sh: report in $report" >&2
  exit $failed
fi
if [ "$quick" = 1 ]; then
  small=${QUICK_SMALL:-tinyllama-1.1b} large=${QUICK_LARGE:-llama2-7b} # other shapes: a try-out on lavapipe
  lq8=$large-q8_0 # the large model's rows (named apart when a try-out makes both shapes one)
  [ "$large" = "$small" ] && lq8=$large-q8_0-large
  m11=$logs/$small-q8_0.gguf # bench --save writes the dense model here (the twin beside it, -mod)
  m11mod=$logs/$small-q8_0-mod.gguf
  [ "$small" = stories260k ] && { echo "run.sh: --quick needs a context over 512 (stories260k has 512)" >&2; exit 2; }
  # kernel_bench NAME FILTER BENCHTIME LIMIT [LOG]: one benchmark of
  # shaders.test, its -test.bench filter narrowed to what a quick run can
  # afford, logged to kernels-LOG.log (LOG defaults to NAME).
  kernel_bench() {
    local lim t0
    t0=$(date +%s)
    lim=$(limit "$4")
    [ "$lim" = 0 ] && { echo "$1: skipped: the quick mode's deadline (QUICK_DEADLINE) was reached" >> "$report"; return; }
    set -- "$1" "$2" "$3" "$lim" "${5:-$1}"
    if ! (cd "$src/shaders" && "$here/tests/shaders.test" -test.list "^$1\$" 2>/dev/null | grep -q "^$1\$"); then
      echo "this build's shaders.test has no $1" >> "$report"
      return
    fi
    (cd "$src/shaders" && timeout -k 10 "$4" "$here/tests/shaders.test" -test.run '^$' -test.bench "$2" -test.benchtime "$3") \
      > "$logs/kernels-${5:-$1}.log" 2>&1 || { echo "$1: FAILED or cut at ${4}s (exit $?)" >> "$report"; failed=1; }
    grep -E '^Benchmark|FAIL|panic|SKIP|--- |probe' "$logs/kernels-${5:-$1}.log" >> "$report"
    took "${5:-$1}" "$t0"
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
  # llama.cpp beside modrun, where the bundle has it (gpu-bundle.sh's
  # LLAMA_CPP_BIN): the issues' measuring stick on the same files, in the
  # same run. A failure of it is reported, not counted as modrun's.
  llama=$here/llama.cpp
  [ -x "$llama/llama-bench" ] || llama=
  # llama_step WHAT NAME TITLE CMD...: one llama.cpp run under the step
  # limit, timed; its output to logs/llama-NAME.{out,log}, the table lines
  # of both (partial when it was cut) to logs/llama-NAME.md and into the
  # report's section TITLE, with the failure's last lines if it failed.
  llama_step() {
    local what=$1 name=$2 title=$3 lim rc t0 log
    shift 3
    [ -n "$llama" ] || return 0
    t0=$(date +%s) log=$logs/llama-$name
    lim=$(limit "${BENCH_LIMIT:-240}")
    [ "$lim" = 0 ] && { skipped "$what $name"; return; }
    timeout -k 5 "$lim" "$@" > "$log.out" 2> "$log.log"
    rc=$?
    cat "$log.out" "$log.log" | grep '^|' > "$log.md"
    { echo "### llama.cpp $(cat "$llama/COMMIT") beside it: $title"; echo; } >> "$report"
    if [ $rc -ne 0 ]; then
      { echo "$what FAILED (exit $rc; not counted as modrun's failure):"; echo '```'; tail -5 "$log.log"; echo '```'; echo; } >> "$report"
    fi
    { cat "$log.md"; echo; } >> "$report"
    echo "run.sh: $what $name: $([ $rc -eq 0 ] && echo ok || echo "exit $rc")" >&2
    took "$what $name" "$t0"
  }
  # llama_row NAME FILE: llama-bench's pp512 and tg128 of FILE, KV f16 as
  # modrun's; its figures (jsonl) to logs/llama-NAME.jsonl.
  llama_row() {
    llama_step llama-bench "$1" "llama-bench -p 512 -n 128 -ngl 99 -r ${LLAMA_REPEATS:-3}, $1" \
      "$llama/llama-bench" -m "$2" -p 512 -n 128 -ngl 99 -r "${LLAMA_REPEATS:-3}" -o md -oe jsonl
    [ -f "$logs/llama-$1.log" ] && grep '^{"build_commit"' "$logs/llama-$1.log" > "$logs/llama-$1.jsonl"
  }
  # llama_batched_row NAME FILE: llama-batched-bench at 1, 8 and 16
  # sequences, 32-token prompts and 64 new tokens each, as bench --parallel.
  llama_batched_row() {
    llama_step llama-batched-bench "batched-$1" "llama-batched-bench -npp 32 -ntg 64 -npl 1,8,16 -ngl 99, $1 (S_TG: aggregate decode tok/s)" \
      "$llama/llama-batched-bench" -m "$2" -c 4096 -b 2048 -ub 512 -npp 32 -ntg 64 -npl 1,8,16 -ngl 99
  }
  ref_row before
  # What a dispatch costs beyond its work (issue 42 item 6): dependent (a
  # barrier before each), independent, handed on by atomic counts in one
  # dispatch or across dispatches without barriers, and a submission's
  # round trip. Seconds, and what the decode targets hinge on
  # (docs/decode-attention-cost.md), so before the rows a deadline may cut.
  { echo "## What a dispatch costs (BenchmarkDispatchGPU)"; echo; echo '```'; } >> "$report"
  kernel_bench BenchmarkDispatchGPU BenchmarkDispatchGPU 50x 30
  { echo '```'; echo; echo "## Bench rows (quick)"; echo; } >> "$report"
  bench_row "$small-q8_0" --synthetic "$small" --type q8_0 --capacity 0.125 --routing router --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 8 --save "$logs/m.gguf"
  mv "$logs/m-$small-q8_0.gguf" "$m11" 2>/dev/null; mv "$logs/m-$small-q8_0-mod.gguf" "$m11mod" 2>/dev/null
  # The same decode with the step's kernels handing off to each other
  # without barriers (MODRUN_HANDOFF=1, issue 42 item 6), its tokens
  # validated against the CPU: what the barriers cost is this row against
  # the one above.
  MODRUN_HANDOFF=1 bench_row "$small-q8_0-handoff" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 8
  MODRUN_MATVEC_DOT=1 bench_row "$small-q8_0-dot" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0
  # The same decode one submission a token (MODRUN_CHAIN=1; the default
  # chains 4 greedy steps a submission): what the host's round trip costs
  # a token is this row against the first.
  MODRUN_CHAIN=1 bench_row "$small-q8_0-no-chain" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0
  # The same decode sampled at temperature 1 (a server's default): each
  # token drawn on the device (argmax_wide's draw, docs/sampling-cost.md),
  # chained as greedy steps are, and with top-p 0.95, min-p 0.05 or top-k
  # 40 (the last workgroup finds top-p's and top-k's cuts and min-p's
  # floor); and with a repeat penalty, which needs the logits on the host:
  # each token's logits read back and drawn there
  # (bench/results/cpu-sampler-2026-11-28.md). What each costs a token is
  # its row against the first.
  bench_row "$small-q8_0-temp1" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0 --temp 1
  bench_row "$small-q8_0-temp1-top-p" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0 --temp 1 --top-p 0.95
  bench_row "$small-q8_0-temp1-min-p" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0 --temp 1 --min-p 0.05
  bench_row "$small-q8_0-temp1-top-k" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0 --temp 1 --top-k 40
  bench_row "$small-q8_0-temp1-penalty" -m "$m11" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0 --temp 1 --repeat-penalty 1.1
  llama_row "$small-q8_0" "$m11"
  # The tensor-core matmul: the default (hilo, f32's precision) above; the
  # f16-operand kernel and none, for what each costs, same file. Without
  # tensor cores the f32 tiles: the pipelined tile (the default), then the
  # tiles before it (MODRUN_MATMUL_PIPE=0).
  MODRUN_TENSOR_CORES=f16 bench_row "$small-q8_0-tensor-cores-f16" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  MODRUN_TENSOR_CORES=0 bench_row "$small-q8_0-no-tensor-cores" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  MODRUN_TENSOR_CORES=0 MODRUN_MATMUL_PIPE=0 bench_row "$small-q8_0-no-tensor-cores-no-pipe" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  # The same tensor-core kernel through VK_KHR_cooperative_matrix (the path
  # AMD and Intel take; NVIDIA offers both): its first run on a GPU, so its
  # tokens are validated against the CPU and the self-check runs it at load.
  MODRUN_COOPMAT=khr bench_row "$small-q8_0-coopmat-khr" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 4
  # The tensor-core matmul's tiles loaded straight from planes of halves
  # (MODRUN_MATMUL_DIRECT=1: no shared staging, W's planes made with each
  # matmul), its tokens validated against the CPU: this row against the
  # default's prefill says whether the staging was the bound.
  MODRUN_MATMUL_DIRECT=1 bench_row "$small-q8_0-direct" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 4
  # With the weights' planes made at load and kept: the planes pass over
  # the weights is this row against the one above.
  MODRUN_MATMUL_DIRECT=resident bench_row "$small-q8_0-direct-resident" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 4
  # And its MoD twin: the routed blocks' products at 64 of 512 rows, the
  # grids the direct product cuts along K (the twin's speed-up over the
  # dense model on this path is this row against the one above).
  MODRUN_MATMUL_DIRECT=1 bench_row "$small-q8_0-mod-direct" -m "$m11mod" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  rm -f "$m11mod"
  # The prefill's attention on tensor cores (MODRUN_ATTENTION_COOP=1,
  # issue 43 item 4), its tokens validated against the CPU at 512; then a
  # long prompt (2000 tokens in TinyLlama's 2048 context; the context less
  # 48 where it is shorter, as a try-out's shape), where attention is a
  # larger share of the prefill, with and without it.
  MODRUN_ATTENTION_COOP=1 bench_row "$small-q8_0-attn-coop" -m "$m11" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 4
  long=$("$here/bin/modrun" inspect "$m11" 2>/dev/null | awk '$1 == "context_length" { print $2; exit }')
  long=$(( ${long:-2048} - 48 )); [ "$long" -gt 2000 ] && long=2000
  bench_row "$small-q8_0-plong" -m "$m11" --backends vulkan --prompt "$long" -n 16 --repeats 2 --validate 0
  MODRUN_ATTENTION_COOP=1 bench_row "$small-q8_0-plong-attn-coop" -m "$m11" --backends vulkan --prompt "$long" -n 16 --repeats 2 --validate 0
  bench_row "$small-q4_k_m" --synthetic "$small" --type q4_k_m --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 8 --save "$logs/$small-q4_k_m.gguf"
  MODRUN_HANDOFF=1 bench_row "$small-q4_k_m-handoff" -m "$logs/$small-q4_k_m.gguf" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 8
  # Q4_K and Q6_K as integer dot products against x in Q8_K blocks
  # (matvec_dot, MODRUN_MATVEC_DOT=1): against the row above and Q8_0's dot row.
  MODRUN_MATVEC_DOT=1 bench_row "$small-q4_k_m-dot" -m "$logs/$small-q4_k_m.gguf" --backends vulkan --prompt 512 -n 64 --repeats 2 --validate 0
  llama_row "$small-q4_k_m" "$logs/$small-q4_k_m.gguf"
  rm -f "$logs/$small-q4_k_m.gguf"
  bench_row "parallel-$small-q8_0" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1
  llama_batched_row "$small-q8_0" "$m11"
  # The same with every step of 2+ rows on the matmul's narrow, split tiles
  # instead of one matvec pass of up to 16 vectors: which is cheaper at 8
  # and 16 rows is this row against the one above.
  MODRUN_VEC_ROWS=1 bench_row "parallel-$small-q8_0-vec-rows-1" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1
  # The same with the batched steps' matvecs (and the decode's) as integer
  # dot products (MODRUN_MATVEC_DOT=1), the rows' x quantized once a
  # product by dot_x, one dispatch more each (docs/matvec-cost.md,
  # "Batched"): this row against the first.
  MODRUN_MATVEC_DOT=1 bench_row "parallel-$small-q8_0-dot" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1
  # The same sequences sampled at temperature 1 (a server's default
  # request), each drawn on the device in the batched step
  # (docs/sampling-cost.md): what sampling costs a step of 16 is this row
  # against the first parallel row.
  bench_row "parallel-$small-q8_0-temp1" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1 --temp 1
  m7=$logs/large-$large-q8_0.gguf
  bench_row "$lq8" --synthetic "$large" --type q8_0 --backends vulkan --prompt 512 -n 32 --repeats 2 --validate 0 --save "$m7"
  MODRUN_HANDOFF=1 bench_row "$lq8-handoff" -m "$m7" --backends vulkan --prompt 512 -n 32 --repeats 2 --validate 0
  # Q8_0's decode matvecs as integer dot products against x in 8 bits
  # (matvec_dot; docs/matvec-cost.md, "Integer dot products").
  MODRUN_MATVEC_DOT=1 bench_row "$lq8-dot" -m "$m7" --backends vulkan --prompt 512 -n 32 --repeats 2 --validate 0
  MODRUN_MATMUL_DIRECT=1 bench_row "$lq8-direct" -m "$m7" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  MODRUN_ATTENTION_COOP=1 bench_row "$lq8-attn-coop" -m "$m7" --backends vulkan --prompt 512 -n 16 --repeats 2 --validate 0
  llama_row "$lq8" "$m7"
  bench_row "$lq8-prompt5" -m "$m7" --backends vulkan --prompt 5 -n 16 --repeats 3 --validate 0
  # The same prompt (the default: one matvec pass over the weights for its
  # 5 rows) as five decode steps, and as the prefill's few-row split tiles:
  # which is sooner to the first token.
  MODRUN_PROMPT_STEPS=8 bench_row "$lq8-prompt5-steps" -m "$m7" --backends vulkan --prompt 5 -n 8 --repeats 3 --validate 0
  MODRUN_PROMPT_STEPS=1 MODRUN_VEC_ROWS=1 bench_row "$lq8-prompt5-tiles" -m "$m7" --backends vulkan --prompt 5 -n 8 --repeats 3 --validate 0
  rm -f "$m7"
  {
    echo "## Kernel benchmarks (shaders.test: GB/s of the matvecs, TFLOP/s of the matmuls, us/call of decode and prefill attention, validated first)"
    echo
    echo '```'
  } >> "$report"
  kernel_bench BenchmarkMatvecGPU "${QUICK_MATVEC:-BenchmarkMatvecGPU/^7b-(gateup-swiglu|qkv-norm)\$/^(F16|Q8_0|Q4_K)\$}" 30x 90
  # one vector of a Q4_K_M file's other type (Q6_K: its down and output
  # matrices) and Q4_K at the down projection's 11,008 columns: matvec_rows
  # against matvec_dot's candidates (docs/matvec-cost.md, "Integer dot products")
  kernel_bench BenchmarkMatvecGPU "${QUICK_MATVEC_DOWN:-BenchmarkMatvecGPU/^7b-down-add\$/^(Q4_K|Q6_K)\$/^nb1\$}" 30x 40 matvec-down
  kernel_bench BenchmarkMatmulGPU "${QUICK_MATMUL:-BenchmarkMatmulGPU/^(tiled-64x64|pipe-128x64|split-pipe-128x64|pipe-128x128|coop-64x64|coop-hilo-64x64|coop-hilo-khr-64x64|coop-pk-64x64|coop-hilo-pk-64x64|coop-hilo-pk-xs-64x64|direct-64x128|direct-hilo-64x128|direct-hilo-prep-64x128|direct-hilo-split-64x128)\$/}" 10x 110
  # decode attention, decode_attend against decode_attend_keys at contexts 70, 512, 4096 (issue 42 item 5)
  kernel_bench BenchmarkDecodeAttendGPU "${QUICK_ATTEND:-BenchmarkDecodeAttendGPU}" 50x 60
  # a 512- and 2048-token prefill's attention, one invocation a query row against 2-8 lanes a row and the tensor cores' (issue 43 item 4)
  kernel_bench BenchmarkPrefillAttentionGPU "${QUICK_PREFILL_ATTN:-BenchmarkPrefillAttentionGPU}" 20x 60
  { echo '```'; echo; } >> "$report"
  ref_row after
  # profile_section TITLE [VAR=VALUE ...] -- ARGS...: `modrun run ARGS
  # --backend vulkan` with the environment given, under the step limit,
  # the last 40 lines of its profile in a code block of the report.
  profile_section() {
    local title=$1 lim envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    { echo "## $title"; echo; echo '```'
      lim=$(limit 60)
      if [ "$lim" = 0 ]; then echo "skipped: the quick mode's deadline (QUICK_DEADLINE) was reached"; else
        env "${envs[@]}" timeout -k 5 "$lim" "$here/bin/modrun" run "$@" --backend vulkan 2>&1 >/dev/null | tail -40
      fi
      echo '```'; echo; } >> "$report"
  }
  profile_section "Where a $small Q8_0 decode's GPU time goes (modrun run --profile, 64 tokens)" \
    -- -m "$m11" -p "Once upon a time" -n 64 --profile
  profile_section "The same with the hand-off (MODRUN_HANDOFF=1): the kernels' share of the wall time, without barriers" \
    MODRUN_HANDOFF=1 -- -m "$m11" -p "Once upon a time" -n 64 --profile
  # A prefill's profile: a prompt of 512 tokens with BOS (the synthetic
  # models' vocabulary has a token per byte: 510 bytes; --stats prints the
  # count) in one batch, one token generated. The profile's first line is
  # the compute probe's peaks; each kernel's TFLOP/s and share of its
  # path's peak follow.
  for _ in $(seq 40); do printf 'Once upon a time there was a little girl named Lily. '; done | head -c 510 > "$logs/prompt-512.txt"
  profile_section "Where a $small Q8_0 prefill's GPU time goes (modrun run --profile --stats, a 512-token prompt, 1 token)" \
    -- -m "$m11" -f "$logs/prompt-512.txt" -n 1 --stats --profile
  profile_section "The same with the direct tensor-core matmul (MODRUN_MATMUL_DIRECT=1): the planes passes and the product apart" \
    MODRUN_MATMUL_DIRECT=1 -- -m "$m11" -f "$logs/prompt-512.txt" -n 1 --stats --profile
  # modrun tune on the 1.1B Q8_0: each knob timed against the knobs kept so
  # far, round by round: what the rows above compare one knob at a time,
  # decided in one run (docs/tuning.md). --validate 0 to fit the lease:
  # the rows above validate the same knobs' tokens against the CPU (a
  # user's tune validates every candidate).
  t0=$(date +%s)
  lim=$(limit 150)
  { echo "## modrun tune on $small Q8_0 (--prompt 512 -n 32 --rounds 3 --validate 0)"; echo; } >> "$report"
  if [ "$lim" = 0 ]; then skipped "tune $small-q8_0"; echo "skipped: the quick mode's deadline (QUICK_DEADLINE) was reached" >> "$report"; else
    timeout -k 5 "$lim" "$here/bin/modrun" tune -m "$m11" --prompt 512 -n 32 --rounds 3 --validate 0 --file "$logs/tuning.json" > "$logs/tune.md" 2> "$logs/tune.log"
    rc=$?
    if [ $rc -eq 0 ]; then sed -e '1d' "$logs/tune.md" >> "$report"; else
      failed=1
      { echo "tune FAILED (exit $rc):"; echo '```'; tail -5 "$logs/tune.log"; echo '```'; } >> "$report"
    fi
    echo "run.sh: tune $small-q8_0: $([ $rc -eq 0 ] && echo ok || echo "exit $rc")" >&2
    took "tune $small-q8_0" "$t0"
  fi
  echo >> "$report"
  # The batched steps unchained (MODRUN_CHAIN=1: one submission a step)
  # beside the first parallel row (chained: docs/batching-gpu.md); last, so
  # that the deadline cuts it before any acceptance row.
  MODRUN_CHAIN=1 bench_row "parallel-$small-q8_0-no-chain" -m "$m11" --backends vulkan --parallel 1,8,16 --prompt 32 -n 64 --repeats 1
  rm -f "$m11"
  acceptance >> "$report"
  { echo "## Step times (seconds; the whole quick mode: $(( $(date +%s) - started )) s of QUICK_DEADLINE=${QUICK_DEADLINE:-540})"; echo
    echo "| step | s |"; echo "|---|--:|"; cat "$logs/times.md" 2>/dev/null; echo; } >> "$report"
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
