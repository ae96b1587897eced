# fsdpp: the two commands a newcomer needs are `make run` and `make test`.
# The torch version is pinned here and nowhere else.
TORCH_VERSION ?= 2.11.0
PYTHON_VERSION := $(shell python3 -c 'import sys;print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null)
FSDPP_CACHE ?= $(HOME)/.cache/fsdpp
VENV ?= $(FSDPP_CACHE)/torch-$(TORCH_VERSION)-py$(PYTHON_VERSION)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
# clang loads LibTorch's precompiled header in ~3 s per file where g++ needs ~10 s.
CXX_COMPILER ?= $(shell command -v clang++ >/dev/null 2>&1 && echo clang++ || echo g++)
CMAKE_ARGS ?=
CTEST_ARGS ?=
JOBS ?= $(shell nproc)

# ccache hits across clones in other directories (cmake/CcachePch.cmake): paths under the clone
# are hashed relative to it, the precompiled header by the digest written beside it, and neither
# the working directory (debug builds) nor the locale enters the hash.
export CCACHE_DIR ?= $(FSDPP_CACHE)/ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
export CCACHE_PCH_EXTSUM := 1
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime,locale
export CCACHE_MAXSIZE ?= 5G

.PHONY: all setup configure build install run test test-unit test-dist test-slow test-asan test-gpu bench bench-memory bench-gpu bundle bench-big-model clean distclean

all: build

setup:
	@TORCH_VERSION=$(TORCH_VERSION) VENV=$(VENV) bash scripts/setup.sh

$(BUILD_DIR)/build.ninja: CMakeLists.txt | setup
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DFSDPP_PYTHON=$(VENV)/bin/python -DCMAKE_CXX_COMPILER=$(CXX_COMPILER) \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $(CMAKE_ARGS)

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# fsdpp built and installed under PREFIX (bin/, lib/, include/, the CMake package): the same
# script the container image runs (Dockerfile, docs/container.md).
PREFIX ?= /usr/local
install:
	@TORCH_VERSION=$(TORCH_VERSION) VENV=$(VENV) BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) \
	  CMAKE_ARGS="$(CMAKE_ARGS)" bash scripts/install.sh $(PREFIX)

# The default job: a short FULL_SHARD training run over 2 ranks. It builds only what the job runs
# (tools/CMakeLists.txt's fsdpp_default_job: fsdpp-run, fsdpp-train, fsdpp-generate and their
# libraries), not the tests; Ninja prints how far it is ([done/total]).
run: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target fsdpp_default_job
	bash scripts/default_job.sh $(BUILD_DIR) $(ARGS)

# -j: the single-process tests (the unit suites, the fuzzers, the build and docs audits) run
# side by side on the cores; a multi-process test runs alone (RUN_SERIAL, or PROCESSORS = its ranks).
test: build
	cd $(BUILD_DIR) && FSDPP_VENV=$(VENV) ctest --output-on-failure --timeout 600 -LE 'slow|gpu' -j $(JOBS) $(CTEST_ARGS)

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit $(CTEST_ARGS)

test-dist: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L dist $(CTEST_ARGS)

test-slow: build
	cd $(BUILD_DIR) && FSDPP_VENV=$(VENV) ctest --output-on-failure -L slow $(CTEST_ARGS)

# The tests that need a GPU (label gpu, docs/gpus.md); without a visible GPU each fails saying so.
test-gpu: build
	cd $(BUILD_DIR) && FSDPP_VENV=$(VENV) ctest --output-on-failure -L gpu $(CTEST_ARGS)

# A relocatable archive of the tools, the GPU tests and benchmark and the non-LibTorch libraries
# they link, for a GPU node with PyTorch but no compiler (docs/gpus.md#the-bundle):
# $(BUILD_DIR)/fsdpp-bundle.tar.gz.
bundle: build
	bash scripts/make_bundle.sh $(BUILD_DIR)

# On a GPU: fsdpp against PyTorch's FSDP2 and eager PyTorch on a ~1B Llama, and the default job
# GPU vs CPU (docs/gpus.md): bench/results/gpu-*.{md,json}. BENCH_QUICK=1 for a small model.
bench-gpu: build
	$(VENV)/bin/python bench/gpu_bench.py --bin $(BUILD_DIR)/bin --out bench/results $(BENCH_ARGS)

# fsdpp against PyTorch's own FSDP2, side by side (docs/benchmarks.md): bench/results/latest.md.
# BENCH_QUICK=1 for a tiny model; BENCH_STEPS, BENCH_WARMUP, BENCH_REPEATS and BENCH_CONFIGS
# ("full_shard:1,2,4 shard_grad_op:2 no_shard:2") to change what runs.
bench: build
	$(VENV)/bin/python bench/run_bench.py --build-dir $(BUILD_DIR) $(BENCH_ARGS)

# Measured memory and step time per memory/speed option (docs/fully-shard.md):
# bench/results/memory_table.{md,json,png}.
bench-memory: build
	$(VENV)/bin/python bench/memory_table.py --build $(BUILD_DIR) $(BENCH_ARGS)

# A 1.57 B-parameter model trained on 4 ranks, each under a data limit smaller than the model in
# fp32, and reloaded from its Hugging Face export (docs/fully-shard.md#models-larger-than-one-device):
# bench/results/big_model.{md,json}. About 17 GiB of memory, 25 GB of disk and 25 minutes on 2 cores;
# BENCH_ARGS="--quick" for a small model.
bench-big-model: build
	$(VENV)/bin/python bench/big_model.py --build $(BUILD_DIR) $(BENCH_ARGS)

# The unit and dist tests under AddressSanitizer + UndefinedBehaviorSanitizer, in their own build
# directory (docs/faults.md, "Sanitizers"). ASAN_LABELS picks the tests (CI: unit). Left out:
# package.* and docs.snippets_compile (their consumer projects are not built with the sanitizers),
# build.layers (it compiles probe files with a layer's flags and runs nothing of fsdpp: the same
# check as the plain build's, ~40 s more of compiling) and the tests that tune or measure malloc
# (mallopt and RSS mean nothing under ASan's allocator; the unit binary's *ResidentMemory* cases
# are left out by tests/CMakeLists.txt).
ASAN_BUILD_DIR ?= build-asan
ASAN_LABELS ?= unit|dist
ASAN_EXCLUDE ?= ^package\.|^docs\.|^build\.|ResidentMemory
# What the sanitizer build makes (default: everything); CI's unit run: fsdpp_unit_test_programs.
ASAN_TARGETS ?=
ASAN_OPTIONS_FSDPP ?= detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
LSAN_OPTIONS_FSDPP ?= suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
UBSAN_OPTIONS_FSDPP ?= print_stacktrace=1:halt_on_error=1

test-asan: setup
	cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DFSDPP_PYTHON=$(VENV)/bin/python -DCMAKE_CXX_COMPILER=$(CXX_COMPILER) \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DFSDPP_SANITIZE=address,undefined \
	  -DFSDPP_BUILD_BENCH=OFF -DFSDPP_BUILD_FUZZERS=OFF $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS) $(if $(ASAN_TARGETS),--target $(ASAN_TARGETS))
	cd $(ASAN_BUILD_DIR) && ASAN_OPTIONS=$(ASAN_OPTIONS_FSDPP) LSAN_OPTIONS=$(LSAN_OPTIONS_FSDPP) \
	  UBSAN_OPTIONS=$(UBSAN_OPTIONS_FSDPP) \
	  FSDPP_VENV=$(VENV) ctest --output-on-failure --timeout 900 -L '$(ASAN_LABELS)' \
	  -LE 'slow|fuzz|gpu' -E '$(ASAN_EXCLUDE)' $(CTEST_ARGS)

clean:
	rm -rf $(BUILD_DIR)
