#!/usr/bin/env bash
# gpu-bundle.sh [DIR]: build the GPU bundle (`make gpu-bundle`), one folder
# that checks a machine's Vulkan GPU with nothing but a Vulkan driver: no Go,
# no Python, no network. It holds bin/modrun, the test binaries of every
# package that runs kernels (go test -c), the fixtures they read, laid out
# as in the repository, and run.sh (scripts/gpu-bundle-run.sh), which runs
# the tests and the standard bench set and writes one Markdown report.
#
# It also packs DIR.tar.xz, the bundle without src/ (the fixtures, which a
# checkout of the repository holds at the same paths: run.sh finds them in
# MODRUN_SRC or the folder it is started from), for a GPU machine that a
# checkout is copied to with a size limit (the device tool: 64 MiB for the
# checkout and what travels with it). One xz stream with a dictionary
# larger than the binaries, so that their common code is stored once: 112
# MB of binaries pack to ~11 MB, where packing each alone gives ~26.
# GPU_BUNDLE_PACK=0 skips it (the pack takes about a minute).
#
# LLAMA_CPP_BIN=DIR (llama.cpp's build/bin, a Vulkan build) puts its
# llama-bench and llama-batched-bench in the bundle, and the quick mode
# then runs them beside modrun on the same files: the issues' measuring
# stick, side by side in one run (LLAMA_CPP_COMMIT names its commit in the
# report). Never part of modrun: a copy of a measuring stick built in /tmp
# (README, "Checking a GPU machine").
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bin/gpu-bundle}
rm -rf "$dir" "$dir.tar.xz"
mkdir -p "$dir/bin" "$dir/tests"
flags=(-trimpath -ldflags "-s -w")
go build "${flags[@]}" -o "$dir/bin/modrun" ./cmd/modrun
# Each test binary runs in its package's folder of src/, so that the
# relative paths of its fixtures (../../testdata/...) resolve as in the repo.
# The root package (the API) runs without its two tests that call the go
# command, which the GPU machine lacks.
pkgs=(vk shaders engine engine/vulkan bench cmd/modrun .)
: > "$dir/tests/packages.txt"
for p in "${pkgs[@]}"; do
  name=$(echo "$p" | tr / _ | sed 's/^\.$/root/')
  go test -c "${flags[@]}" -o "$dir/tests/$name.test" "./$p"
  mkdir -p "$dir/src/$p"
  skip=""
  [ "$p" = . ] && skip="^(TestImportDirection|TestReadmeExample|TestServerImportsTheAPI|TestReadmeDemoIsTheMakefiles)$"
  printf '%s %s %s\n' "$p" "$name" "$skip" >> "$dir/tests/packages.txt"
done
cp -r testdata models "$dir/src/"
cp -r vk/testdata "$dir/src/vk/"
mkdir -p "$dir/src/engine/grammar" && cp -r engine/grammar/testdata "$dir/src/engine/grammar/" # the JSON schemas (internal/schematest)
cp example_test.go "$dir/src/" # TestExamplesOnVulkan reruns its examples from their // Output: lines
# A module of its own, so that the repository's ./... (go test, go list in
# TestImportDirection) does not take the copied example for a package.
printf 'module modrun-gpu-bundle\n' > "$dir/go.mod"
# The shared test data the bundle's tests read (internal/shared: models,
# the llama.cpp quantizations, the Llama 2 vocabulary, a TinyStories text),
# where this machine has it: the GPU machine has no ../shared/data, and
# -trimpath leaves the tests no source path to find it from. run.sh points
# MODRUN_SHARED_DATA at it. It is test input, never part of the repository.
shared=${MODRUN_SHARED_DATA:-../shared/data}
if [ -d "$shared" ]; then
  mkdir -p "$dir/shared-data/vocab" "$dir/shared-data/tinystories"
  cp -r "$shared/models" "$dir/shared-data/"
  # The quantizations but the F32 original (8 MB), which only CPU tests
  # read (perplexity --compare, the gguf package's quantizer checks).
  mkdir -p "$dir/shared-data/quant"
  find "$shared/quant" -maxdepth 1 -type f ! -name 'kq-f32.gguf' -exec cp {} "$dir/shared-data/quant/" \;
  cp "$shared"/vocab/ggml-vocab-llama-spm.gguf* "$dir/shared-data/vocab/"
  cp "$shared/tinystories/TinyStories-validation.head-hf.txt" "$dir/shared-data/tinystories/"
else
  echo "gpu-bundle: no shared data at $shared: the tests that read it will skip on the GPU machine" >&2
fi
if [ -n "${LLAMA_CPP_BIN:-}" ]; then
  mkdir -p "$dir/llama.cpp"
  for b in llama-bench llama-batched-bench; do
    [ -x "$LLAMA_CPP_BIN/$b" ] || { echo "gpu-bundle: LLAMA_CPP_BIN=$LLAMA_CPP_BIN has no $b (build it: README, \"Checking a GPU machine\")" >&2; exit 1; }
    cp "$LLAMA_CPP_BIN/$b" "$dir/llama.cpp/"
  done
  strip "$dir"/llama.cpp/* 2>/dev/null || true
  # Its commit, for the report: LLAMA_CPP_COMMIT, or its checkout's (a
  # source tree without .git, as `git archive` makes, has none).
  echo "${LLAMA_CPP_COMMIT:-$(git -C "$LLAMA_CPP_BIN/../.." rev-parse --short HEAD 2>/dev/null || echo unknown)}" > "$dir/llama.cpp/COMMIT"
  # A build that links its libraries dynamically needs them beside it.
  if ldd "$dir/llama.cpp/llama-bench" | grep -q 'libllama\|libggml'; then
    echo "gpu-bundle: $LLAMA_CPP_BIN/llama-bench links libllama/libggml dynamically: build llama.cpp with -DBUILD_SHARED_LIBS=OFF" >&2
    exit 1
  fi
fi
cp scripts/gpu-bundle-run.sh "$dir/run.sh"
git rev-parse HEAD > "$dir/COMMIT" 2>/dev/null || echo unknown > "$dir/COMMIT"
echo "gpu-bundle: $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: $dir/run.sh [REPORT.md]"
if [ "${GPU_BUNDLE_PACK:-1}" != 0 ]; then
  # -T1: one block, so the dictionary spans every binary.
  tar -C "$(dirname "$dir")" --exclude="$(basename "$dir")/src" --exclude="$(basename "$dir")/logs" -cf - "$(basename "$dir")" |
    xz -T1 --lzma2=preset=9,dict=192MiB > "$dir.tar.xz.tmp"
  mv "$dir.tar.xz.tmp" "$dir.tar.xz"
  echo "gpu-bundle: packed $dir.tar.xz ($(du -m "$dir.tar.xz" | cut -f1) MiB, without src/); on a machine with a checkout: tar -xJf $dir.tar.xz -C /tmp && MODRUN_SRC=CHECKOUT /tmp/$(basename "$dir")/run.sh --quick REPORT.md"
fi
