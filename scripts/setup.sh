#!/usr/bin/env bash
# setup.sh PACKAGE... : install, with apt-get, the Debian packages named that
# are missing, and check the Go toolchain. Idempotent: when nothing is missing
# it changes nothing and asks no network.
set -euo pipefail

need_go="1.22"
if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
  else
    echo "setup: Go $need_go or newer is required (Debian 12's golang package is too old): see https://go.dev/doc/install" >&2
    exit 1
  fi
fi
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -1)" != "$need_go" ]; then
  echo "setup: Go $need_go or newer is required, found $have_go" >&2
  exit 1
fi

missing=()
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "setup: need root to run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# An install from stale package lists fails on a fresh machine; update first.
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
