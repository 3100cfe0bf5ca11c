# modrun: `make demo` and `make test` install what they need (apt-get, only
# what is missing) and then run. See README.md.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

# Debian packages, by what needs them. They grow as the project does
# (Vulkan loader, lavapipe, glslc with the GPU backend).
BUILD_DEBS   := gcc libc6-dev
FIXTURE_DEBS := python3-sentencepiece python3-numpy

DEMO_MODEL ?= ../shared/data/models/stories260K.gguf

.PHONY: setup build test demo fuzz fixtures clean

setup:
	@scripts/setup.sh $(BUILD_DEBS)

build: setup
	go build -o bin/modrun ./cmd/modrun

test: setup
	@scripts/test.sh

# Until the engine generates text, the demo shows the file and the tokenizer.
demo: build
	bin/modrun inspect $(DEMO_MODEL)
	echo "Once upon a time" | bin/modrun tokenize -m $(DEMO_MODEL)

# A longer fuzz run of every target (FUZZTIME=10m make fuzz).
fuzz: setup
	FUZZTIME=$${FUZZTIME:-2m} scripts/test.sh

# Regenerate the committed golden fixtures (needs Python packages).
fixtures:
	@scripts/setup.sh $(FIXTURE_DEBS)
	/usr/bin/python3 scripts/gen_tokenizer_fixture.py

clean:
	rm -rf bin
