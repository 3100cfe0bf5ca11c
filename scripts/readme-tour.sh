#!/usr/bin/env bash
# readme-tour.sh: run every command README.md presents to users, as written,
# in a fresh clone of this repository in a temporary folder elsewhere (no
# ../shared beside it), so that a command needing a file the repository
# does not have, or that no README command makes, fails here.
#
#   scripts/readme-tour.sh          every command (minutes: the Vulkan and
#                                   benchmark runs are slow on lavapipe)
#   scripts/readme-tour.sh --fast   the quick ones (CI: scripts/test.sh)
#   scripts/readme-tour.sh --list   print the commands and what is done with each
#
# The commands are the README's fenced lines that start with "$ " (their
# output lines are not run) and, in blocks without "$ ", each line that runs
# something (bin/modrun, make, go, printf, head, echo, curl, python3).
# `modrun serve` runs in the background until its block's curl commands are
# done. A command that shows an error on purpose must exit 1 or 2; every
# other one must exit 0. Skipped, each with the reason printed: what needs
# the network or a file from a hub, what installs packages or runs for
# ever, the GUI viewer.
set -euo pipefail
mode=${1:-all}
case $mode in all | --fast | --list) ;; *) echo "usage: $0 [--fast | --list]" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/.." && pwd)

# extract prints one command a line (continuations joined) from README.md.
extract() {
  /usr/bin/python3 - "$1" <<'EOF'
import re, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
runs = re.compile(r"^(bin/modrun|make |go |printf |head |echo |curl |/usr/bin/python3 )")
i = 0
while i < len(lines):
    if not lines[i].startswith("```"):
        i += 1
        continue
    j = i + 1
    while j < len(lines) and not lines[j].startswith("```"):
        j += 1
    block = lines[i + 1:j] if lines[i].strip() in ("```", "```sh", "```bash", "```console") else []
    dollar = any(l.startswith("$ ") for l in block)
    k = 0
    while k < len(block):
        l = block[k]
        cmd = l[2:] if dollar and l.startswith("$ ") else (l if not dollar and runs.match(l) else None)
        while cmd is not None and cmd.endswith("\\") and k + 1 < len(block):
            k += 1
            cmd = cmd[:-1] + " " + block[k].strip()
        if cmd is not None:
            print(cmd)
        k += 1
    i = j + 1
EOF
}

# verdict says what happens to a command: "run", "fail" (it shows an error
# on purpose), "serve", "slow" (not with --fast) or "skip: REASON".
verdict() {
  case $1 in
    *huggingface.co* | *tinyllama-1.1b-chat* | *Llama-3.2-1B-Instruct* | *TinyStoriesV2-GPT4-valid.txt* | *runs/retro/*) echo "skip: a file from a hub (the network), or made from one" ;;
    make\ test* | make\ demo* | make\ fixtures* | make\ gpu-bundle*) echo "skip: installs packages (apt-get) or runs the whole suite; CI runs it" ;;
    *-fuzz\ *) echo "skip: fuzzes until stopped" ;;
    bin/modrun-viewer*) echo "skip: a window (GUI)" ;;
    "go test -bench"* | "go test -run '^\$' -bench"*) echo "slow" ;;
    *"inspect /tmp/cut.gguf"* | *"/nonexistent.gguf"* | *"--device 1"* | *'"wizard"'* | "bin/modrun devices --kernel-stats") echo "fail" ;;
    *" serve "*) echo "serve" ;;
    *train/train.py* | *runs/retro/* | *"--backend vulkan"* | *"--backends vulkan"* | *"--backends cpu,vulkan"* | *"bench --synthetic stories15m"* | *"bench --synthetic d=2048"* | *"bench --synthetic tinyllama-1.1b"* | *"bench --synthetic llama3.2-1b"* | *"/tmp/llama3.2-1b.gguf"* | *"--parallel 1,4,8,16"* | *"devices --check"* | *modllama2.gguf*--routing\ topk* | "bin/modrun bench -m models"*) echo "slow" ;;
    *) echo "run" ;;
  esac
}

# main is the tour; wrapped so that bash reads the whole script before it
# runs (an edit to this file during a run does not break the run).
main() {
if [ "$mode" = --list ]; then
  extract "$repo/README.md" | while IFS= read -r c; do printf '%-60s %s\n' "$(verdict "$c")" "$c"; done
  exit 0
fi

work=$(mktemp -d /tmp/modrun-tour.XXXXXX)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
git clone -q "$repo" "$work/modrun"
cd "$work/modrun"
echo "readme-tour: a fresh clone in $work/modrun ($(git log --oneline -1))"
go build -o bin/modrun ./cmd/modrun # the README's build line

failed=0 ran=0 skipped=0
limit=600
[ "$mode" = --fast ] && limit=120
extract README.md >"$work/commands"
while IFS= read -r c; do
  v=$(verdict "$c")
  case $v in
    skip:*) echo "SKIP ($v): $c"; skipped=$((skipped + 1)); continue ;;
    slow) if [ "$mode" = --fast ]; then skipped=$((skipped + 1)); continue; fi ;;
    serve)
      if [ -n "$server" ]; then kill "$server"; wait "$server" 2>/dev/null || true; fi
      bash -c "exec $c" >"$work/serve.log" 2>&1 </dev/null &
      server=$!
      for _ in $(seq 100); do
        curl -sf http://127.0.0.1:8080/health >/dev/null 2>&1 && break
        sleep 0.2
      done
      if ! curl -sf http://127.0.0.1:8080/health >/dev/null; then
        echo "FAIL (not ready): $c"; cat "$work/serve.log"; failed=$((failed + 1))
      else
        echo "ok   (serving): $c"; ran=$((ran + 1))
      fi
      continue
      ;;
  esac
  set +e
  timeout "$limit" bash -c "$c" </dev/null >"$work/out" 2>&1
  status=$?
  set -e
  ran=$((ran + 1))
  if grep -q "no such file or directory" "$work/out" && [ "$v" != fail ]; then
    echo "FAIL (a missing file): $c"; sed 's/^/    /' "$work/out" | tail -5; failed=$((failed + 1))
  elif [ "$v" = fail ] && { [ $status -eq 1 ] || [ $status -eq 2 ] || { [ $status -eq 0 ] && grep -q '"error"' "$work/out"; }; }; then
    echo "ok   (the error it shows): $c"
  elif [ "$v" != fail ] && [ $status -eq 0 ]; then
    echo "ok   $c"
  else
    echo "FAIL (exit $status): $c"; sed 's/^/    /' "$work/out" | tail -5; failed=$((failed + 1))
  fi
done <"$work/commands"
echo "readme-tour: $ran run, $failed failed, $skipped skipped ($mode)"
[ $failed -eq 0 ]
}

main "$@"
