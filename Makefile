# Entry points for people and CI. CMake + Ninja do the building; this file only picks
# build directories and flags. Each build dir is configured once (when it lacks
# CMakeCache.txt); after that Ninja re-runs CMake itself when CMakeLists.txt changes.

CMAKE        ?= cmake
CLANG_FORMAT ?= clang-format
CTEST_JOBS   ?= 2
FUZZ_SECONDS ?= 30

RELEASE_DIR ?= build/release
ASAN_DIR    ?= build/asan
FUZZ_DIR    ?= build/fuzz

FORMAT_DIRS  := $(wildcard src include tools tests fuzz bench)
FORMAT_FILES  = $(shell find $(FORMAT_DIRS) -path tests/data -prune -o -type f \
                  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cc' \) -print | sort)
FUZZERS      := $(basename $(notdir $(wildcard fuzz/*_fuzzer.cpp)))
# Extra seed directories per fuzzer (fuzz/seeds/<name> is used too when it exists).
SEEDS_region_text_fuzzer := examples

.PHONY: all deps release run test asan test-asan format format-check fuzz clean help dashboard

all: release

help:
	@echo "make run          build (Release) and run the bundled examples: ./build/release/fusor run"
	@echo "make test         build (Release) and run the test suite with ctest"
	@echo "make test-asan    build with AddressSanitizer + UBSan (Debug) and run the tests"
	@echo "make format       clang-format every C++ file in place; format-check only reports"
	@echo "make dashboard    regenerate docs/targets.md from bench/results (CI checks it matches)"
	@echo "make fuzz         clang libFuzzer build, each fuzzer for FUZZ_SECONDS (default 30 s)"
	@echo "FUSOR_SKIP_DEPS=1 skips the package check (scripts/install-deps.sh)"

deps:
	@scripts/install-deps.sh

$(RELEASE_DIR)/CMakeCache.txt: | deps
	$(CMAKE) -S . -B $(RELEASE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

$(ASAN_DIR)/CMakeCache.txt: | deps
	$(CMAKE) -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFUSOR_SANITIZE=ON

# The whole tree is built with fuzzer coverage so libFuzzer sees inside the library;
# clang's warnings differ from g++'s, so they do not fail this build.
$(FUZZ_DIR)/CMakeCache.txt: | deps
	CC=clang CXX=clang++ $(CMAKE) -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DFUSOR_FUZZ=ON -DFUSOR_SANITIZE=ON -DFUSOR_WERROR=OFF -DFUSOR_BUILD_TESTS=OFF \
	  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link

release: $(RELEASE_DIR)/CMakeCache.txt
	$(CMAKE) --build $(RELEASE_DIR)

run: release
	./$(RELEASE_DIR)/fusor run

dashboard: release
	./$(RELEASE_DIR)/fusor-results --results bench/results --out docs/targets.md

test: release
	ctest --test-dir $(RELEASE_DIR) --output-on-failure -j$(CTEST_JOBS)

asan: $(ASAN_DIR)/CMakeCache.txt
	$(CMAKE) --build $(ASAN_DIR)

# Leak checking is off: LeakSanitizer's exit-time thread scan crashes ("Tracer caught
# signal 11") in processes that have run OpenMP kernels and oneDNN; ASan's memory errors
# and UBSan stay on.
test-asan: asan
	ASAN_OPTIONS=detect_leaks=0 ctest --test-dir $(ASAN_DIR) --output-on-failure -j$(CTEST_JOBS)

format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

format-check:
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)

fuzz: $(FUZZ_DIR)/CMakeCache.txt
ifeq ($(FUZZERS),)
	@echo "fuzz: no fuzz/*_fuzzer.cpp targets yet"
else
	$(CMAKE) --build $(FUZZ_DIR) --target $(FUZZERS)
	@set -e; $(foreach f,$(FUZZERS),mkdir -p fuzz/corpus/$(f) && echo "== $(f) ($(FUZZ_SECONDS) s)" && \
	  ./$(FUZZ_DIR)/$(f) -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/ \
	    fuzz/corpus/$(f) $(wildcard fuzz/seeds/$(f)) $(SEEDS_$(f)) &&) true
endif

clean:
	rm -rf $(RELEASE_DIR) $(ASAN_DIR) $(FUZZ_DIR)
