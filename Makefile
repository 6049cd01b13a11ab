# fairq: a thin Makefile over CMake. `make test` and `make run` work on a fresh Debian 12.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
CONFIG     ?= config/fairq.yaml

.PHONY: all deps build test test-unit asan bench run demo clean

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

bench: build
	@$(BUILD)/fairq-bench

run: build
	@scripts/run.sh $(BUILD) $(CONFIG)

demo: build
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
