#!/usr/bin/env bash
# run.sh [REPORT.md]: check this machine's Vulkan device with the GPU bundle
# (built by `make gpu-bundle`): first `modrun devices --check` (every kernel
# variant once against the CPU), then the kernel and engine tests, then the
# standard bench set, and write one Markdown report (default report.md
# beside this script; full logs in logs/). Needs only a Vulkan driver.
#
#   BENCH_SHAPES  shapes to bench (default: stories260k stories15m tinyllama-1.1b llama2-7b llama3.2-1b)
#   BENCH_TYPES   weight types (default: f16 q8_0 q4_k_m; a type this build's
#                 --type does not list is reported as skipped: q4_k_m comes
#                 with issue 21's quantizer)
#   BENCH_PROMPT  prompt tokens (default 512, the batched prefill of issue 14;
#                 stories260k, whose context is 512, gets at most 448)
#   BENCH_ARGS    more bench flags (default: -n 64 --repeats 3)
#   BENCH_PARALLEL_SHAPES shapes for the many-sequences rows (default:
#                 stories15m tinyllama-1.1b llama2-7b; Q8_0, dense and MoD twin)
#   BENCH_PARALLEL sequence counts (default 1,4,8,16; issue 33's bench --parallel)
#   MODRUN_DEVICE the Vulkan device, as for modrun
# A step that fails is reported as failed; the others still run, and the
# exit status is 1 when any failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
report=${1:-$here/report.md}
logs=$here/logs
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
  echo "## Tests"
  echo
  echo "| package | result | passed | failed | skipped |"
  echo "|---|---|--:|--:|--:|"
} > "$report"
while read -r p name skip; do
  bin=$here/tests/$name.test
  log=$logs/test-$name.log
  (cd "$here/src/$p" && "$bin" -test.v -test.count=1 -test.timeout=20m ${skip:+-test.skip "$skip"}) > "$log" 2>&1
  rc=$?
  pass=$(grep -c '^--- PASS' "$log"); fail=$(grep -c '^--- FAIL' "$log"); skip=$(grep -c '^--- SKIP' "$log")
  result=ok; [ $rc -ne 0 ] && { result="FAIL (exit $rc)"; failed=1; }
  echo "| $p | $result | $pass | $fail | $skip |" >> "$report"
  echo "run.sh: tests $p: $result ($pass passed, $fail failed, $skip skipped)" >&2
done < "$here/tests/packages.txt"
{
  echo
  echo "Skips and failures are listed in logs/test-*.log (grep -- '--- SKIP\\|--- FAIL')."
  echo
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
    "$here/bin/modrun" bench --synthetic "$shape" --type "$typ" --capacity 0.125 --backends vulkan --prompt "$prompt" $bench_args \
      --out "$logs/bench-$name.md" --json-out "$logs/bench-$name.json" > /dev/null 2> "$logs/bench-$name.log"
    rc=$?
    if [ $rc -eq 0 ]; then
      echo "run.sh: bench $name: ok" >&2
      sed -e '1s/^# /### /' "$logs/bench-$name.md" >> "$report"
    else
      failed=1
      echo "run.sh: bench $name: FAILED (exit $rc)" >&2
      { echo "### $name: FAILED (exit $rc)"; echo; echo '```'; tail -5 "$logs/bench-$name.log"; echo '```'; } >> "$report"
    fi
    echo >> "$report"
  done
done
{
  echo "## Bench --parallel: many sequences sharing steps on Vulkan (vulkan.Stepper)"
  echo
} >> "$report"
for shape in ${BENCH_PARALLEL_SHAPES:-stories15m tinyllama-1.1b llama2-7b}; do
  name=parallel-$shape-q8_0
  "$here/bin/modrun" bench --synthetic "$shape" --type q8_0 --capacity 0.125 --backends vulkan \
    --parallel "${BENCH_PARALLEL:-1,4,8,16}" --prompt 32 -n 64 --repeats 3 \
    --out "$logs/bench-$name.md" --json-out "$logs/bench-$name.json" > /dev/null 2> "$logs/bench-$name.log"
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "run.sh: bench $name: ok" >&2
    sed -e '1s/^# .*/### '"$name"'/' "$logs/bench-$name.md" >> "$report"
  else
    failed=1
    echo "run.sh: bench $name: FAILED (exit $rc)" >&2
    { echo "### $name: FAILED (exit $rc)"; echo; echo '```'; tail -5 "$logs/bench-$name.log"; echo '```'; } >> "$report"
  fi
  echo >> "$report"
done
echo "run.sh: report in $report" >&2
exit $failed
