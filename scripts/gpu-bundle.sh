#!/usr/bin/env bash
# gpu-bundle.sh [DIR]: build the GPU bundle (`make gpu-bundle`), one folder
# that checks a machine's Vulkan GPU with nothing but a Vulkan driver: no Go,
# no Python, no network. It holds bin/modrun, the test binaries of every
# package that runs kernels (go test -c), the fixtures they read, laid out
# as in the repository, and run.sh (scripts/gpu-bundle-run.sh), which runs
# the tests and the standard bench set and writes one Markdown report.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bin/gpu-bundle}
rm -rf "$dir"
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
  cp -r "$shared/models" "$shared/quant" "$dir/shared-data/"
  cp "$shared"/vocab/ggml-vocab-llama-spm.gguf* "$dir/shared-data/vocab/"
  cp "$shared/tinystories/TinyStories-validation.head-hf.txt" "$dir/shared-data/tinystories/"
else
  echo "gpu-bundle: no shared data at $shared: the tests that read it will skip on the GPU machine" >&2
fi
cp scripts/gpu-bundle-run.sh "$dir/run.sh"
git rev-parse HEAD > "$dir/COMMIT" 2>/dev/null || echo unknown > "$dir/COMMIT"
echo "gpu-bundle: $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: $dir/run.sh [REPORT.md]"
