#!/usr/bin/env bash
# vs-llama-server.sh: modrun serve against llama-server on the same GGUF
# file and the same CPU, with modrun bench serve's streaming clients at 1, 4
# and 8 at a time. One server runs at a time; the two alternate round by
# round (ROUNDS, default 3) so that load from elsewhere falls on both.
#
#   bin/modrun bench --synthetic stories15m --type q8_0 --save /tmp/s15m-q8_0.gguf --backends cpu
#   bench/serve/vs-llama-server.sh /tmp/s15m-q8_0.gguf /tmp/llama.cpp/build/bin/llama-server OUT_DIR
#
# Writes OUT_DIR/{modrun,llama-server}-ROUND.json (modrun bench serve --json)
# and each server's log beside it; bench/serve/summarize.py OUT_DIR prints
# the medians and the per-round ratios. THREADS (default: every core) is
# llama-server's -t and modrun's GOMAXPROCS. llama-server (c392e50) aborts
# when SIGTERM stops it ("terminate called without an active exception"):
# the shell's "Aborted" line that follows is harmless.
set -euo pipefail
model=$1 llama=$2 out=$3
rounds=${ROUNDS:-3} clients=${CLIENTS:-1,4,8} requests=${REQUESTS:-4} n=${N:-64}
threads=${THREADS:-$(nproc)} # llama-server's -t, modrun's GOMAXPROCS
mkdir -p "$out"
cd "$(dirname "$0")/../.."

wait_ready() { # URL PID
  for _ in $(seq 300); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "the server exited" >&2; return 1; }
    sleep 0.2
  done
  echo "$1 never became ready" >&2
  return 1
}

run() { # NAME URL ROUND CMD...
  local name=$1 url=$2 round=$3
  shift 3
  "$@" >"$out/$name-$round.log" 2>&1 &
  local pid=$!
  wait_ready "$url" "$pid"
  bin/modrun bench serve --url "$url" --clients "$clients" --requests "$requests" -n "$n" --json >"$out/$name-$round.json"
  kill -TERM "$pid"
  wait "$pid" || true
}

for round in $(seq "$rounds"); do
  # Eight slots each: up to 8 clients stream at once. llama-server's
  # context is split among its slots (-c 2048: 256 tokens each, the
  # model's length); modrun's --ctx is per sequence.
  run llama-server http://127.0.0.1:8091 "$round" "$llama" -m "$model" --host 127.0.0.1 --port 8091 -t "$threads" -np 8 -c 2048 --no-webui
  run modrun http://127.0.0.1:8092 "$round" env GOMAXPROCS="$threads" bin/modrun serve -m "$model" --port 8092 --backend cpu --parallel 8
  echo "round $round done"
done
