# modrun: `make demo` and `make test` install what they need (apt-get, only
# what is missing) and then run. See README.md.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

# Debian packages, by what needs them. They grow as the project does
# (Vulkan loader, lavapipe, glslc with the GPU backend).
BUILD_DEBS   := gcc libc6-dev libvulkan-dev
# cmd/modrun-viewer: GLFW's cgo build (X11 headers and libraries), OpenGL
# (libGL; Mesa's llvmpipe renders when there is no GPU), and Xvfb with xauth
# for xvfb-run, under which the tests run the viewer.
VIEWER_DEBS  := libx11-dev libxcursor-dev libxrandr-dev libxinerama-dev libxi-dev libxxf86vm-dev \
                libgl1-mesa-dev libgl1-mesa-dri xvfb xauth
VULKAN_DEBS  := libvulkan1 mesa-vulkan-drivers glslc spirv-tools vulkan-validationlayers
TEST_DEBS    := $(BUILD_DEBS) $(VIEWER_DEBS) $(VULKAN_DEBS) python3-torch python3-numpy python3-sentencepiece \
                chromium
FIXTURE_DEBS := $(TEST_DEBS)

DEMO_MODEL ?= models/tinystories-mod.gguf

.PHONY: setup build viewer-build viewer test demo fuzz fixtures gpu-bundle clean

setup:
	@scripts/setup.sh $(BUILD_DEBS)

# bin/modrun only: the demo needs nothing else (the viewer's GLFW cgo build
# takes minutes on a fresh machine, so it has a target of its own).
build: setup
	go build -ldflags "-X main.commit=$(shell git rev-parse HEAD 2>/dev/null)" -o bin/modrun ./cmd/modrun

viewer-build: setup
	@scripts/setup.sh $(VIEWER_DEBS)
	go build -o bin/modrun-viewer ./cmd/modrun-viewer

# The desktop viewer tells a story beside its live routing map (needs a
# display; xvfb-run gives one: see README.md).
viewer: viewer-build
	bin/modrun-viewer -m $(DEMO_MODEL) -p "Once upon"

test:
	@scripts/setup.sh $(TEST_DEBS)
	@scripts/test.sh

# The demo tells a story with the shipped MoD model on the Vulkan backend
# (lavapipe when there is no GPU).
demo: build
	@scripts/setup.sh libvulkan1 mesa-vulkan-drivers
	bin/modrun -m $(DEMO_MODEL) -p "Once upon" -n 120 --backend vulkan --stats

# One folder (bin/gpu-bundle) that checks a GPU machine with only a Vulkan
# driver: the binaries, the GPU tests and the standard bench set (run.sh).
gpu-bundle: setup
	@scripts/gpu-bundle.sh $(GPU_BUNDLE)

# A longer fuzz run of every target (FUZZTIME=10m make fuzz).
fuzz:
	@scripts/setup.sh $(TEST_DEBS)
	FUZZTIME=$${FUZZTIME:-2m} scripts/test.sh

# Regenerate the committed golden fixtures: SentencePiece ids, and the
# PyTorch reference's MoD models and outputs (about 10 minutes: a short training run).
fixtures:
	@scripts/setup.sh $(FIXTURE_DEBS)
	/usr/bin/python3 scripts/gen_tokenizer_fixture.py
	scripts/gen_mod_fixtures.sh

clean:
	rm -rf bin
