# fairq: a thin Makefile over CMake. `make test` and `make run` work on a fresh Debian 12.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECS  ?= 60
JOBS       ?= 2
CONFIG     ?= config/fairq.yaml

.PHONY: all deps build test test-unit asan fuzz fuzz-build fuzz-merge container-test bench run demo clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFAIRQ_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The whole suite: unit tests and integration tests against a real nats-server.
test: build
	@scripts/test.sh $(BUILD)

test-unit: build
	@ctest --test-dir $(BUILD) --output-on-failure -L unit

# Unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Asan -DFAIRQ_WERROR=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@ctest --test-dir $(ASAN_BUILD) --output-on-failure -L unit

# The libFuzzer targets of tests/fuzz (docs/fuzzing.md), built with clang:
# each replays its corpus, then fuzzes for FUZZ_SECS seconds (FUZZ_SECS=0:
# replay only); findings go to $(FUZZ_BUILD)/fuzz-out, not into the repo.
fuzz-build: deps
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DFAIRQ_FUZZ=ON -DFAIRQ_WERROR=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	@rm -f $(FUZZ_BUILD)/fuzz-out/*/summary
	@FUZZ_SECS=$(FUZZ_SECS) ctest --test-dir $(FUZZ_BUILD) --output-on-failure -L fuzz; \
	  rc=$$?; cat $(FUZZ_BUILD)/fuzz-out/*/summary 2>/dev/null | awk '{ print; n += $$3 } \
	  / ok$$/ { p++ } / FAILED$$/ { f++ } \
	  END { printf "fuzz: %d executions in all\nfuzz: %d passed, %d failed\n", n, p, f }'; \
	  exit $$rc

# Fold what `make fuzz` found into the committed corpora, keeping only the
# inputs that add coverage.
fuzz-merge: fuzz-build
	@tests/fuzz/merge.sh $(FUZZ_BUILD)

# The image and docker-compose.yml built and started for real (dockerd, offline base images), and the
# whole build with the unit tests on a bare bookworm with only what install-deps.sh installs. Needs root.
container-test:
	@scripts/container.sh test

bench: build
	@$(BUILD)/fairq-bench

run: build
	@scripts/run.sh $(BUILD) $(CONFIG)

demo: build
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
