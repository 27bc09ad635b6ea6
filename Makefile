# framezip: a thin layer over CMake presets. Every target installs the Debian packages it needs
# first (scripts/install-deps.sh: a no-op when they are all there).
#
#   make demo        build, then run the main job on the embedded default (CPU)
#   make test        build, then run every test (GPU tests only where a GPU is present)
#   make test-asan   the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-tsan   the threaded parts' tests under ThreadSanitizer (TSAN_TESTS below)
#   make build       just build
#   FRAMEZIP_CUDA=OFF make test    build and test without the CUDA backend (build-cpu/)

FRAMEZIP_CUDA ?= AUTO
PRESET := $(if $(filter OFF,$(FRAMEZIP_CUDA)),cpu,default)
BUILD_DIR := $(if $(filter OFF,$(FRAMEZIP_CUDA)),build-cpu,build)
JOBS ?= $(shell nproc)

# ccache: paths under the checkout are hashed relative to it, so a fresh clone in another folder
# (CI) reuses what an earlier build compiled.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true

.PHONY: all deps build test demo test-asan test-tsan fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) -DFRAMEZIP_CUDA=$(FRAMEZIP_CUDA) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }
	@grep -E '^-- framezip:' $(BUILD_DIR).configure.log || true
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@scripts/run-tests.sh $(BUILD_DIR)

demo: build
	@scripts/demo.sh $(BUILD_DIR)

test-asan: deps
	@cmake --preset asan > build-asan.configure.log 2>&1 || { cat build-asan.configure.log; exit 1; }
	@cmake --build build-asan -j $(JOBS)
	@scripts/run-tests.sh build-asan

# The threaded parts whose code ThreadSanitizer can see end to end: the server's scheduler,
# sessions, commit queue, shared sessions and uploads (server_unit_test), the KV store's tiers,
# its gRPC service and its daemon with Redis. Debian's gRPC, Abseil and protobuf are not
# instrumented: tests/sanitizers/tsan.supp leaves out reports through them, and through FFmpeg and
# OpenCV's codecs. The media worker pool (its refill and zygote threads, forked workers) is in, and
# two whole servers in one process: over HTTP on the test double, and on the shipped model
# (docs/DEVELOPING.md says which integration tests stay out, and why).
TSAN_TESTS := server_unit_test media_worker_test kvstore_test kvstore_service_test \
  kvstore_integration_test openai_http_test server_real_model_test
test-tsan: deps
	@cmake --preset tsan > build-tsan.configure.log 2>&1 || { cat build-tsan.configure.log; exit 1; }
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TESTS)
	@TSAN_OPTIONS="suppressions=$(CURDIR)/tests/sanitizers/tsan.supp $${TSAN_OPTIONS:-}" \
	  scripts/run-tests.sh build-tsan $(TSAN_TESTS)

fuzz: deps
	@cmake --preset fuzz > build-fuzz.configure.log 2>&1 || { cat build-fuzz.configure.log; exit 1; }
	@cmake --build build-fuzz -j $(JOBS)

clean:
	rm -rf build build-cpu build-asan build-tsan build-fuzz build*.configure.log
