#!/usr/bin/env bash
# test.sh: everything `make test` checks. Formatting and vet first (cheap),
# then every test (with the race detector: sessions of the API share a
# runner across goroutines) with a summary that lists skips and their reasons, then each
# fuzz target for a bounded time over its committed seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-20s}
# The tests run the engine's defaults: a tuning file in this user's cache
# folder (modrun tune) must not change them. Tests of the tuning set
# MODRUN_TUNING themselves.
export MODRUN_TUNING=off

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...

# The PyTorch reference (train/): Debian's python3, which has python3-torch.
# One torch thread: two are slower on a 2-core machine shared with go test.
OMP_NUM_THREADS=1 /usr/bin/python3 -m unittest discover -s train -p 'test_*.py'

# The README's quick commands, as written, in a fresh clone elsewhere (the
# committed tree): a command needing a file no clone has fails here.
scripts/readme-tour.sh --fast

go build -o bin/testsum ./internal/testsum
set +e
# -timeout: the root package's API tests (every backend, the grammar's
# sampling, the server's clients) pass go test's default 10 minutes under the
# race detector on a 2-core machine; engine/vulkan's pass 30 minutes on a
# slow one (session 31's machine ran go generate 2.5x slower than session
# 30's, and engine/vulkan, beside shaders, was cut at 30 minutes): a
# timeout is for a hang, not for the machine's speed.
go test -race -json -count=1 -timeout 60m ./... | bin/testsum
status=$?
set -e
[ $status -eq 0 ] || exit $status

# fuzz_once runs one target for FUZZTIME; on failure it prints everything
# but the progress lines (the failing input and where it was saved).
# It returns 0 on a pass, 1 on a real failure (an input was saved under
# testdata/fuzz/), and 2 on a bare "context deadline exceeded" with nothing
# saved: the race in Go's fuzz coordinator at the end of a -fuzztime
# duration (go.dev/issue/75804, fixed in Go 1.27), which loaded machines hit.
fuzz_once() {
  local log status before after
  log=$(mktemp)
  before=$(ls "$3/testdata/fuzz/$2" 2>/dev/null | sort)
  go test -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" "$1" >"$log" 2>&1
  status=$?
  after=$(ls "$3/testdata/fuzz/$2" 2>/dev/null | sort)
  if [ $status -eq 0 ]; then
    tail -2 "$log"
  else
    grep -v '^fuzz: elapsed' "$log"
    if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
      status=2
    else
      status=1
    fi
  fi
  rm -f "$log"
  return $status
}

# Go before 1.27 has that race; fuzz with Go 1.27.1 when the go command can
# fetch it from the module proxy (GOTOOLCHAIN, cached after the first time),
# and otherwise with the local Go, retrying the race as above.
fuzz_go=$(go env GOVERSION)
if [ "$(printf '%s\n%s\n' go1.27 "$fuzz_go" | sort -V | head -1)" != go1.27 ]; then
  if GOTOOLCHAIN=go1.27.1 go version >/dev/null 2>&1; then
    export GOTOOLCHAIN=go1.27.1
    fuzz_go=go1.27.1
  fi
fi
echo "fuzz  with $fuzz_go"

# Each fuzz target: `go test -fuzz` takes one target in one package per run.
# A real failure fails at once; the coordinator race is retried (twice).
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func \(Fuzz[A-Za-z0-9_]*\)' "$dir"/*_test.go 2>/dev/null | awk '{print $2}'); do
    echo "fuzz  $pkg $target for $FUZZTIME"
    for try in 1 2 3; do
      set +e
      fuzz_once "$pkg" "$target" "$dir"
      status=$?
      set -e
      [ $status -eq 0 ] && break
      [ $status -eq 1 ] && exit 1
      if [ $try -eq 3 ]; then echo "fuzz  $pkg $target: the coordinator race three times in a row"; exit 1; fi
      echo "fuzz  $pkg $target: 'context deadline exceeded' with no input saved is Go's fuzz coordinator race (go.dev/issue/75804), not a finding; running it again"
    done
  done
done
