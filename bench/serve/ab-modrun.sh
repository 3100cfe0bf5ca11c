#!/usr/bin/env bash
# ab-modrun.sh: two builds of modrun serve, A and B, on the same GGUF file
# with modrun bench serve's streaming clients (1, 4 and 8 at a time), round
# by round alternating (ROUNDS, default 3), so that load from elsewhere
# falls on both: a before/after of a server change.
#
#   bench/serve/ab-modrun.sh /tmp/modrun-before /tmp/modrun-after /tmp/s15m-q8_0.gguf OUT_DIR
#
# Writes OUT_DIR/{a,b}-ROUND.json (modrun bench serve --json);
# bench/serve/summarize.py OUT_DIR a b prints the medians and ratios. THREADS
# (default: every core) is each server's GOMAXPROCS; PARALLEL (default 8)
# its --parallel.
set -euo pipefail
a=$1 b=$2 model=$3 out=$4
rounds=${ROUNDS:-3} clients=${CLIENTS:-1,4,8} requests=${REQUESTS:-4} n=${N:-64}
threads=${THREADS:-$(nproc)} parallel=${PARALLEL:-8}
mkdir -p "$out"
cd "$(dirname "$0")/../.."

run() { # NAME BINARY ROUND
  GOMAXPROCS="$threads" "$2" serve -m "$model" --port 8094 --backend cpu --parallel "$parallel" >"$out/$1-$3.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    curl -sf http://127.0.0.1:8094/health >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "$2 serve exited" >&2; return 1; }
    sleep 0.2
  done
  bin/modrun bench serve --url http://127.0.0.1:8094 --clients "$clients" --requests "$requests" -n "$n" --json >"$out/$1-$3.json"
  kill -TERM "$pid"
  wait "$pid" || true
}

for round in $(seq "$rounds"); do
  run a "$a" "$round"
  run b "$b" "$round"
  echo "round $round done"
done
