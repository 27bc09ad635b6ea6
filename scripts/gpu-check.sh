#!/usr/bin/env bash
# gpu-check.sh: runs every [cuda] test (the GPU-only kernels and paths against the CPU on fresh
# random inputs) and the device cases (each test written once, run on the CPU and the GPU against
# f64 or another independent reference: the ops' in tests/unit/engine/ops/, and the [devices]
# cases of the component test binaries named in $device_case_bins below); then the end-to-end stage (the shipped model's whole engine on the GPU
# against the CPU engine: multi-turn KV reuse, export and restore across devices); then
# `framezip eval` of 240 synthvid test items on the GPU against the CPU for none, zipvl, kivi,
# attentionpack and dynamic_llava, from a staged frame pack; then `framezip bench gpu --json` (as the standalone framezip_bench_gpu)
# and the PyTorch peer bench/gpu/torch_peer.py. On a GPU machine, inside 8 minutes, writing logs
# and results to $OUT.
#
# HOW TO CALL IT
#   1. Here, on the development machine, before a GPU lease (2 cores: a few minutes, cached after):
#        scripts/gpu-check.sh --prepare
#      builds build-gpucheck/ (-DFRAMEZIP_GPU_CHECK_ONLY=ON: engine core + ops + engine_cuda_test
#      + engine_device_ops_test + framezip_bench_gpu only) and stages those binaries, with the
#      full build's engine_device_cuda_test, the component test binaries that hold device cases
#      ($device_case_bins) and framezip-eval-frames (run `make test` first), a
#      frame pack of 240 synthvid test items (`framezip eval --save-frames`, 103 MB) and the
#      shared libraries a bare CUDA image lacks (abseil, spdlog, fmt, OpenBLAS, gfortran,
#      quadmath, Oniguruma, utf8proc, cudart; ~60 MB), packed as .gpucheck/staged.tar.xz (~39 MB,
#      git-ignored), to be carried with the ~19 MB tree under the 64 MiB limit. A run unpacks it
#      into build-gpucheck/staged/.
#   2. On the lent GPU, from the repository root (the device tool's `run`; it sets $OUT):
#        run(command="bash scripts/gpu-check.sh", carry=[".gpucheck"], timeout_s=480)
#      If the machine has the C++ dependencies (abseil, spdlog/fmt, OpenBLAS, Catch2 v2) it builds
#      the same subset from source with all its cores and runs that; the bare CUDA image has none
#      of them (and nothing can be installed there), so there it runs the binary staged in step 1
#      against the machine's own cuBLAS and cuSOLVER (libcublas/libcublasLt 600 MB, libcusolver
#      135 MB: never carried).
#   Options: --prepare (step 1), --build-only (configure + build the subset here, run nothing),
#   --from-source (refuse the staged binary), --staged (run the staged binary even where the
#   dependencies are present), --tests-only (skip both benchmarks), --quick (the benchmarks'
#   4k smoke sizes), --no-sanitizer (skip the memcheck pass), --rehearse (here, with no GPU: after
#   the [cuda] tests skip, run the end-to-end stage and the eval with --device cpu, so the
#   staging, libraries, frame pack and verdicts are checked before a lease; exits 2),
#   --server-only (only the server stage: framezip-server on the device behind framezip-kvstore,
#   the demo's three questions from raw frames, `framezip bench server` at 1/16/64 sessions and
#   `framezip bench sessions` in a fixed KV budget (64 MiB on the shipped model), `framezip bench
#   server` and `bench sessions` (2 GiB) again on the LLaVA-OneVision-0.5B shape with random
#   weights, and there `bench sessions` in one 2.5 GiB memory budget for weights and KV with bf16
#   and then FP8 weights, figures into
#   $OUT/latest.json and summary.txt; with --rehearse, on the CPU at small sizes),
#   --stage-server (stage only its binaries, libraries and raw demo frames; --prepare does it
#   too),
#   --profile=REGEX (instead of the checks: Nsight Compute over the first launches of the kernels
#   matching REGEX in `framezip bench gpu --quick`, into ncu.txt). Without $OUT, results go to
#   build-gpucheck/out/.
#   Time budget (8 min on a bare H200; everything ends by 450 s after the start): [cuda] tests
#   <= 150 s, device op tests and each binary's device cases <= 60 s (seconds on 16 cores),
#   end-to-end engine <= 120 s, GPU eval <= 75 s per policy, framezip bench gpu <= 200 s, torch_peer.py <= 110 s, each under
#   `timeout` so one stuck step cannot eat the others; with time left, a compute-sanitizer
#   memcheck pass over the [cuda] tests (its verdict in summary.txt, its tail in gpu-check.log; `--no-sanitizer` skips).
#   The server stage (~5 min on the GPU) does not fit beside the rest: give it its own call,
#   `bash scripts/gpu-check.sh --server-only` (timeout_s=420).
#
# WHAT COMES BACK (in $OUT): summary.txt (one line per outcome, the device, the seed),
# gpu-check.log (everything, the benchmarks' readable lines too), cuda-tests.txt (Catch2 console
# report, the end-to-end stage's report, the GPU eval's tables and the server stage's readable
# lines appended), cuda-tests.xml (JUnit), bench-gpu.json (`framezip bench gpu --json`),
# torch-peer.json (torch_peer.py: the eager and the static-cache CUDA-graph peers), latest.json
# (bench/gpu/write_latest.py's figures merged over bench/gpu/latest.json: the server stage's, and
# after the benchmarks ours over the torch peers, the kernel ratios, the per-step counts and the
# GPU eval's top-1 agreement; keys it could not compute are named in summary.txt; copy it there,
# and its sections at the end of summary.txt into bench/RESULTS.md), and when it built here
# build.log (the configure step too): 8 files at most, the device tool's limit. summary.txt ends
# with dense prefill vs torch SDPA ratios and decode vs the torch peers at the same batch and
# context when both ran.
# Exit status: 0 every [cuda] test passed on a GPU and both benchmarks ran; 1 a test or a
# benchmark failed or the build broke; 2 nothing could be checked (no GPU, or neither a staged
# binary nor the dependencies to build one).
set -uo pipefail

mode=run
from_source=0
staged=0
tests_only=0
server_only=0
rehearse=0
eval_device=cuda
quick=0
sanitizer=1
profile=""
for arg in "$@"; do
  case "$arg" in
    --prepare) mode=prepare ;;
    --stage-server) mode=stage-server ;;
    --build-only) mode=build ;;
    --from-source) from_source=1 ;;
    --staged) staged=1 ;;
    --tests-only) tests_only=1 ;;
    --server-only) server_only=1 ;;
    --rehearse) rehearse=1; tests_only=1; sanitizer=0; eval_device=cpu ;;
    --quick) quick=1 ;;
    --profile=*) profile=${arg#--profile=} ;;
    --no-sanitizer) sanitizer=0 ;;
    -h | --help) sed -n '2,66p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2
build_dir=build-gpucheck
e2e_build=build  # the full build, source of the end-to-end stage's binaries
# The full build's test binaries that hold device cases (tagged [devices]) of components outside
# the subset's engine_device_ops_test: KIVI pages, ZipVL's scoring and split, the vision tower,
# AttentionPack's SVD, packing and decode attention, the serving decoder, Dynamic-LLaVA's
# predictors and row removal (these read models/ and tests/data/golden/ of the working tree).
# Staged with the end-to-end binary and run with the device op tests, on the CPU and the GPU.
device_case_bins=(engine_kv_test engine_compress_test engine_vision_test engine_low_rank_test
  engine_llm_test engine_sparse_prefill_test)
server_clip=tests/data/synthvid/demo-v2-test-000022.mp4  # the demo's clip: 256 frames, 128x128
server_questions=tests/data/synthvid/demo-v2-test-000022.questions.tsv
eval_items=240  # synthvid test items of the GPU eval: one changed answer moves accuracy 0.42 point
stage_dir=.gpucheck
# The GPU eval's JSON objects, one a line, for write_latest.py's eval keys (not under $OUT: the
# device tool brings back 8 files at most).
eval_reports=$build_dir/gpu-eval.jsonl
unpacked=$build_dir/staged  # where unpack_stage opens the archive (never carried back)
jobs=$(nproc 2>/dev/null || echo 2)
nvcc_path=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })

out=${OUT:-$repo/$build_dir/out}
mkdir -p "$out"
summary="$out/summary.txt"
note() { echo "gpu-check: $*"; echo "$*" >>"$summary"; }
: >"$summary"

# The subset's C++ dependencies, as headers (a bare image has none of them).
missing_deps() {
  local missing=()
  local dirs=(/usr/include /usr/local/include)
  have() { for d in "${dirs[@]}"; do [ -e "$d/$1" ] && return 0; done; return 1; }
  have absl/status/status.h || missing+=("abseil")
  have spdlog/spdlog.h || missing+=("spdlog")
  have fmt/format.h || missing+=("fmt")
  { have cblas.h || have openblas/cblas.h || have x86_64-linux-gnu/openblas-pthread/cblas.h; } ||
    missing+=("OpenBLAS")
  have catch2/catch.hpp || missing+=("Catch2 v2")
  command -v cmake >/dev/null || missing+=("cmake")
  [ -n "$nvcc_path" ] || missing+=("nvcc")
  echo "${missing[*]}"
}

build_subset() {
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  local t0=$SECONDS
  # The lock: on the shared development machine only one build may run at a time.
  local lock=(); [ -w /tmp ] && command -v flock >/dev/null && lock=(flock /tmp/framezip-build.lock)
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    "${lock[@]}" cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DFRAMEZIP_GPU_CHECK_ONLY=ON -DFRAMEZIP_CUDA=ON \
      -DCMAKE_CUDA_COMPILER="$nvcc_path" >"$out/build.log" 2>&1 ||
      { note "FAIL configure (see build.log)"; tail -30 "$out/build.log"; return 1; }
  fi
  "${lock[@]}" cmake --build "$build_dir" --target engine_cuda_test engine_device_ops_test \
    framezip_bench_gpu_bin \
    -j "$jobs" >>"$out/build.log" 2>&1 ||
    { note "FAIL build (see build.log)"; tail -40 "$out/build.log"; return 1; }
  note "built $build_dir/tests/engine_cuda_test, engine_device_ops_test and" \
    "$build_dir/bin/framezip_bench_gpu in" \
    "$((SECONDS - t0)) s with $jobs jobs"
}

# Copies the test binary and every shared library it needs that a bare CUDA image lacks: all
# but glibc's, the C++ runtime's and the CUDA math libraries the image provides (cuBLAS, and
# cuSOLVER with what it needs: cuSPARSE, nvJitLink).
stage() {
  rm -rf "$stage_dir" && mkdir -p "$stage_dir/bin" "$stage_dir/lib"
  cp "$build_dir/tests/engine_cuda_test" "$build_dir/tests/engine_device_ops_test" \
    "$build_dir/bin/framezip_bench_gpu" "$stage_dir/bin/"
  # The end-to-end stage's binary comes from the full build (`make test` made it): it needs the
  # model loader and tokenizer, which the subset does not build. Its extra libraries (Oniguruma,
  # utf8proc) are small.
  local e2e=()
  if [ -x "$e2e_build/tests/engine_device_cuda_test" ]; then
    cp "$e2e_build/tests/engine_device_cuda_test" "$stage_dir/bin/"
    e2e=("$e2e_build/tests/engine_device_cuda_test")
  else
    note "no $e2e_build/tests/engine_device_cuda_test (run make test first): the end-to-end" \
      "stage is not staged"
  fi
  local name
  for name in "${device_case_bins[@]}"; do
    if [ -x "$e2e_build/tests/$name" ]; then
      cp "$e2e_build/tests/$name" "$stage_dir/bin/"
      e2e+=("$e2e_build/tests/$name")
    else
      note "no $e2e_build/tests/$name (run make test first): its device cases are not staged"
    fi
  done
  # framezip-eval-frames (full build, engine only) and a frame pack of the synthvid test split's
  # first $eval_items items written by `framezip eval --save-frames`: `framezip eval` on the GPU
  # without the media stage, whose FFmpeg and OpenCV the GPU machine lacks (tools/eval/frame_pack.h).
  if [ -x "$e2e_build/bin/framezip-eval-frames" ] && [ -x "$e2e_build/bin/framezip" ]; then
    cp "$e2e_build/bin/framezip-eval-frames" "$stage_dir/bin/"
    e2e+=("$e2e_build/bin/framezip-eval-frames")
    if "$e2e_build/bin/framezip" eval --model models/framezip-tiny-video --suite synthvid \
      --split test --limit "$eval_items" --save-frames "$stage_dir/bin/synthvid-test.frames" \
      >"$out/eval-pack.log" 2>&1; then
      note "wrote a frame pack of $eval_items synthvid test items" \
        "($(du -h "$stage_dir/bin/synthvid-test.frames" | cut -f1) before compression)"
    else
      note "could not write the frame pack (tail of $out/eval-pack.log):"
      tail -5 "$out/eval-pack.log"
      rm -f "$stage_dir/bin/synthvid-test.frames"
    fi
  else
    note "no $e2e_build/bin/framezip-eval-frames (run make test first): the GPU eval is not staged"
  fi
  ldd "$build_dir/tests/engine_cuda_test" "$build_dir/tests/engine_device_ops_test" \
    "$build_dir/bin/framezip_bench_gpu" "${e2e[@]}" |
    awk '/=> \// {print $1, $3}' | sort -u |
    while read -r name path; do
      case "$name" in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | \
          libstdc++.so* | libgcc_s.so* | libcublas* | libcusolver* | libcusparse* | \
          libnvJitLink*) ;;
        *) cp -L "$path" "$stage_dir/lib/$name" ;;
      esac
    done
  local newest_glibc
  newest_glibc=$(objdump -T "$stage_dir"/bin/* "$stage_dir"/lib/* 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  # Carried compressed: the device tool carries 64 MiB with the tree, and OpenBLAS alone is 36 MB.
  # unpack_stage opens it on the GPU machine.
  # xz -9: its 64 MiB dictionary spans the binaries, which share most of their code (every
  # kernel, FlashInfer's included, is linked into each): 39 MB where -6 gives 58, which with the
  # tree would pass the device tool's carry.
  XZ_OPT=-9 tar -C "$stage_dir" -cJf "$stage_dir/staged.tar.xz" bin lib || return 1
  note "packed $(du -sh "$stage_dir/bin" "$stage_dir/lib" | awk '{print $1}' | paste -sd+ -)" \
    "into staged.tar.xz ($(du -h "$stage_dir/staged.tar.xz" | cut -f1))"
  rm -rf "$stage_dir/bin" "$stage_dir/lib"
  grep -qxF "/$stage_dir/" .git/info/exclude 2>/dev/null || echo "/$stage_dir/" >>.git/info/exclude
  source_stamp >"$stage_dir/STAMP"
  note "staged $stage_dir ($(du -sh "$stage_dir" | cut -f1)); needs ${newest_glibc:-?} and" \
    "cuBLAS 13, cuSOLVER 12 (with cuSPARSE, nvJitLink) on the GPU machine"
}

# A hash of every source the staged binaries are built from. --prepare writes it into the stage;
# a run compares it with the working tree it was carried with, so binaries staged before the last
# engine or test change are never mistaken for a check of the current code.
source_stamp() {
  find engine tests/unit/engine bench tools/eval tools/eval_frames models/framezip-tiny-video \
    CMakeLists.txt cmake -type f 2>/dev/null | LC_ALL=C sort |
    xargs sha1sum | sha1sum | cut -d' ' -f1
}

# Where the GPU machine keeps a CUDA math library ($1, e.g. libcublas.so.13): the toolkit, the
# loader's cache, or the nvidia-* wheels of its PyTorch.
cuda_lib_dir() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk -v lib="$1" '$1 == lib {print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  LIB="$1" python3 - <<'EOF' 2>/dev/null
import glob, os, site
for root in site.getsitepackages():
    for f in glob.glob(os.path.join(root, "nvidia", "**", os.environ["LIB"]), recursive=True):
        print(os.path.dirname(f)); raise SystemExit
EOF
}

# Opens the staged archives (stage, stage_server) into $unpacked, with tar or, where the image
# has no xz, Python's tarfile; afresh each run, so it always matches the carried archives.
unpack_stage() {
  rm -rf "$unpacked"
  local archive
  for archive in "$stage_dir/staged.tar.xz" "$stage_dir/server.tar.xz"; do
    [ -f "$archive" ] || continue
    mkdir -p "$unpacked" || return 0
    tar -C "$unpacked" -xJf "$archive" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$archive" "$unpacked" ||
      note "could not unpack $archive"
  done
}

# Builds (or takes the staged binary), runs every [cuda] test, records the outcome.
main() {
  note "started $(date -u +%FT%TZ) on $(hostname) mode=$mode"
  case "$mode" in
    prepare)
      build_subset || exit 1
      stage
      stage_server
      exit 0
      ;;
    stage-server)
      stage_server
      exit $?
      ;;
    build)
      build_subset || exit 1
      exit 0
      ;;
  esac

  # ---- run: on the GPU machine ----
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L | tee -a "$summary"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$summary"
  else
    note "nvidia-smi not found"
  fi
  [ -n "$nvcc_path" ] && "$nvcc_path" --version | tail -1 | sed 's/^/nvcc: /' | tee -a "$summary"

  bin=""
  ops_bin=""
  bench_bin=""
  unpack_stage
  mkdir -p "$build_dir" && rm -f "$eval_reports" "$out/latest.json"  # this run's figures only
  if [ "$server_only" = 1 ]; then
    [ "$rehearse" = 1 ] && note "REHEARSAL: the server stage on the CPU at small sizes"
    run_server_stage
    exit $?
  fi
  missing=$(missing_deps)
  if [ -z "$missing" ] && [ "$staged" = 0 ]; then
    build_subset || exit 1
    bin="$build_dir/tests/engine_cuda_test"
    ops_bin="$build_dir/tests/engine_device_ops_test"
    bench_bin="$build_dir/bin/framezip_bench_gpu"
  elif [ "$from_source" = 0 ] && [ -f "$unpacked/bin/engine_cuda_test" ]; then
    note "not building here (${missing:+missing: $missing}${missing:-asked for --staged});" \
      "running the binaries staged by --prepare"
    if [ "$(cat "$stage_dir/STAMP" 2>/dev/null)" != "$(source_stamp)" ]; then
      note "WARNING: the staged binaries were built from other sources than this tree" \
        "(run scripts/gpu-check.sh --prepare after the last change); results are for those"
    fi
    chmod +x "$unpacked"/bin/*  # in case the copy to this machine dropped the bit
    bin="$unpacked/bin/engine_cuda_test"
    ops_bin="$unpacked/bin/engine_device_ops_test"
    bench_bin="$unpacked/bin/framezip_bench_gpu"
    libs="$repo/$unpacked/lib"
    for lib in libcublas.so.13 libcublasLt.so.13 libcusolver.so.12 libcusparse.so.12 \
      libnvJitLink.so.13; do
      d=$(cuda_lib_dir "$lib")
      if [ -z "$d" ]; then
        note "$lib not found; the test will not load"
      else
        case ":$libs:" in *":$d:"*) ;; *) libs="$libs:$d" ;; esac
      fi
    done
    # Only our binaries get the staged libraries: exported, they would come before the CUDA
    # runtime of torch's own wheels in the torch peer script.
    staged_libs="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    note "NOTHING CHECKED: cannot build here (missing: $missing) and no staged binary;" \
      "run scripts/gpu-check.sh --prepare on the development machine and carry .gpucheck"
    exit 2
  fi

  # The seed of the random inputs, so a failure can be replayed (FRAMEZIP_TEST_SEED=N).
  export FRAMEZIP_TEST_SEED=${FRAMEZIP_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
  if [ -n "$profile" ]; then
    run_profile "$profile"
    exit $?
  fi
  note "FRAMEZIP_TEST_SEED=$FRAMEZIP_TEST_SEED"
  t0=$SECONDS
  with_libs timeout 150 "$bin" "[cuda]" --durations yes >"$out/cuda-tests.txt" 2>&1
  rc=$?
  [ "$rc" = 124 ] && note "the [cuda] tests ran past 150 s and were stopped"
  # The JUnit report only when the tests finished quickly enough to run them twice.
  [ $((SECONDS - t0)) -lt 60 ] && with_libs timeout 60 "$bin" "[cuda]" -r junit -o "$out/cuda-tests.xml" \
    >/dev/null 2>&1
  tail -25 "$out/cuda-tests.txt"
  if grep -q "SKIPPED: no usable GPU" "$out/cuda-tests.txt"; then
    note "NOTHING CHECKED: $(grep -m1 'SKIPPED: no usable GPU' "$out/cuda-tests.txt")"
    if [ "$rehearse" = 1 ]; then
      # The rest of a run with the CPU in the GPU's place: the staged binaries, their libraries,
      # the frame pack and the verdict lines, checked before a GPU lease is spent on them.
      note "REHEARSAL: the end-to-end binary must load (its [cuda] cases skip); the eval runs" \
        "with --device cpu in the GPU's place"
      with_libs "$ops_bin" >"$out/ops.tmp" 2>&1
      note "REHEARSAL device op tests, CPU half (exit $?):" \
        "$(grep -E '^(All tests passed|test cases:)' "$out/ops.tmp" | tail -1)"
      for name in "${device_case_bins[@]}"; do
        device_bin="$unpacked/bin/$name"
        [ -z "${staged_libs:-}" ] && device_bin="$e2e_build/tests/$name"
        FRAMEZIP_SOURCE_DIR="$repo" with_libs "$device_bin" "[devices]" >"$out/ops.tmp" 2>&1
        note "REHEARSAL device cases of $name, CPU half (exit $?):" \
          "$(grep -E '^(All tests passed|test cases:)' "$out/ops.tmp" | tail -1)"
      done
      rm -f "$out/ops.tmp"
      run_end_to_end
      run_gpu_eval
      write_gpu_latest
      run_server_stage_if_time 90
    fi
    exit 2
  fi
  result=$(grep -E '^(All tests passed|test cases:)' "$out/cuda-tests.txt" | tail -1)
  status=0
  if [ "$rc" = 0 ]; then
    note "PASS [cuda] tests in $((SECONDS - t0)) s: $result"
  else
    note "FAIL [cuda] tests (exit $rc) in $((SECONDS - t0)) s: $result"
    status=1
  fi
  run_device_op_tests || status=1
  run_end_to_end || status=1
  run_gpu_eval || status=1
  run_server_stage_if_time 300 || status=1
  if [ "$tests_only" = 0 ]; then
    run_benchmarks || status=1
  fi
  write_gpu_latest || status=1
  if [ "$sanitizer" = 1 ]; then
    run_sanitizer || status=1
  fi
  exit "$status"
}

# Each op's test written once for every device (tests/unit/engine/ops/), then the [devices] cases
# of $device_case_bins: on the GPU machine each runs on the CPU and the GPU against the same
# references. Their reports are appended to cuda-tests.txt. A line "cuda:0 not run" means the GPU
# half did not run: that is a failure here, and so is a device-case binary that was not staged.
run_device_op_tests() {
  local status=0
  run_device_ops_binary || status=1
  local name bin
  for name in "${device_case_bins[@]}"; do
    bin="$unpacked/bin/$name"
    [ -z "${staged_libs:-}" ] && bin="$e2e_build/tests/$name"
    run_device_cases "$bin" || status=1
  done
  return "$status"
}

# The [devices] cases of one component test binary ($1), as run_device_ops_binary runs the ops'.
run_device_cases() {
  local bin=$1
  if [ ! -x "$bin" ]; then
    note "FAIL device cases: no $bin (run make test, then scripts/gpu-check.sh --prepare)"
    return 1
  fi
  local t0=$SECONDS
  echo "---- device cases: $bin [devices] ----" >>"$out/cuda-tests.txt"
  FRAMEZIP_SOURCE_DIR="$repo" with_libs timeout "$(step_limit 60)" "$bin" "[devices]" \
    --durations yes >"$out/ops.tmp" 2>&1
  local rc=$?
  cat "$out/ops.tmp" >>"$out/cuda-tests.txt"
  local result
  result=$(grep -E '^(All tests passed|test cases:)' "$out/ops.tmp" | tail -1)
  if grep -q "cuda:0 not run" "$out/ops.tmp"; then
    note "FAIL device cases of $(basename "$bin"): the GPU half did not run" \
      "($(grep -m1 'cuda:0 not run' "$out/ops.tmp"))"
    rm -f "$out/ops.tmp"
    return 1
  fi
  rm -f "$out/ops.tmp"
  if [ "$rc" = 0 ]; then
    note "PASS device cases of $(basename "$bin") (CPU and GPU) in $((SECONDS - t0)) s: $result"
    return 0
  fi
  note "FAIL device cases of $(basename "$bin") (exit $rc) in $((SECONDS - t0)) s: $result"
  return 1
}

# engine_device_ops_test, every case.
run_device_ops_binary() {
  if [ ! -x "$ops_bin" ]; then
    note "FAIL device op tests: no $ops_bin (run scripts/gpu-check.sh --prepare again)"
    return 1
  fi
  local t0=$SECONDS
  echo "---- device op tests: $ops_bin ----" >>"$out/cuda-tests.txt"
  with_libs timeout "$(step_limit 60)" "$ops_bin" --durations yes >"$out/ops.tmp" 2>&1
  local rc=$?
  cat "$out/ops.tmp" >>"$out/cuda-tests.txt"
  local result
  result=$(grep -E '^(All tests passed|test cases:)' "$out/ops.tmp" | tail -1)
  if grep -q "cuda:0 not run" "$out/ops.tmp"; then
    note "FAIL device op tests: the GPU half did not run ($(grep -m1 'cuda:0 not run' "$out/ops.tmp"))"
    rm -f "$out/ops.tmp"
    return 1
  fi
  rm -f "$out/ops.tmp"
  if [ "$rc" = 0 ]; then
    note "PASS device op tests (CPU and GPU) in $((SECONDS - t0)) s: $result"
    return 0
  fi
  note "FAIL device op tests (exit $rc) in $((SECONDS - t0)) s: $result"
  return 1
}

# The end-to-end stage: the whole engine (decoder, KV pages, vision tower, projector) of the
# shipped model on the GPU against the engine on the CPU, a three-turn conversation whose later
# turns reuse the earlier turns' KV, and a conversation exported from one device and restored on
# the other (tests/unit/engine/llm/engine_device_cuda_test.cc). Its report is appended to
# cuda-tests.txt (the device tool brings back 8 files at most).
run_end_to_end() {
  local e2e_bin="$unpacked/bin/engine_device_cuda_test"
  [ -z "${staged_libs:-}" ] && e2e_bin="$e2e_build/tests/engine_device_cuda_test"
  if [ ! -x "$e2e_bin" ]; then
    note "SKIP end-to-end: no $e2e_bin (the subset does not build it; --prepare stages it from" \
      "a full build)"
    return 0
  fi
  local t0=$SECONDS
  echo "---- end-to-end: $e2e_bin [cuda] ----" >>"$out/cuda-tests.txt"
  FRAMEZIP_SOURCE_DIR="$repo" with_libs timeout "$(step_limit 120)" "$e2e_bin" "[cuda]" \
    --durations yes >>"$out/cuda-tests.txt" 2>&1
  local rc=$?
  local result
  result=$(grep -E '^(All tests passed|test cases:)' "$out/cuda-tests.txt" | tail -1)
  if [ "$rc" = 0 ]; then
    note "PASS end-to-end engine on the GPU in $((SECONDS - t0)) s: $result"
    return 0
  fi
  note "FAIL end-to-end engine on the GPU (exit $rc) in $((SECONDS - t0)) s: $result"
  return 1
}

# One line from framezip-eval-frames' JSON object (on stdin; $1 names the device): both accuracies
# and the agreement.
eval_verdict() {
  python3 -c '
import json, sys
j = json.load(sys.stdin)
a = j["agreement"]
print("%d items: %s %.2f %%, cpu %.2f %%, top-1 agreement %.2f %% over %d positions, KL %.2e"
      % (j["items"], sys.argv[1], 100 * j["accuracy"], 100 * a["reference_accuracy"],
         100 * a["top1"], a["positions"], a["kl"]))' "$1" 2>/dev/null
}

# `framezip eval` of the shipped model on the GPU against the CPU, from the staged frame pack:
# accuracy within 0.5 point of the CPU's and teacher-forced top-1 agreement with the CPU >= 99%,
# for none and the four compressing policies (dynamic_llava: the shipped predictors on the GPU). Tables go to cuda-tests.txt, verdicts to summary.txt.
run_gpu_eval() {
  local eval_bin="$unpacked/bin/framezip-eval-frames" pack="$unpacked/bin/synthvid-test.frames"
  [ -z "${staged_libs:-}" ] && eval_bin="$e2e_build/bin/framezip-eval-frames"
  if [ ! -x "$eval_bin" ] || [ ! -f "$pack" ]; then
    note "SKIP GPU eval: no $eval_bin or no $pack (--prepare stages both from a full build)"
    return 0
  fi
  local status=0 policy rc line
  for policy in none zipvl kivi attentionpack dynamic_llava; do
    if [ $((450 - SECONDS)) -lt 40 ]; then
      note "SKIP GPU eval --policy $policy: $((450 - SECONDS)) s left"
      continue
    fi
    local t0=$SECONDS
    echo "---- GPU eval: $eval_bin --policy $policy --device $eval_device --reference-device cpu ----" \
      >>"$out/cuda-tests.txt"
    with_libs timeout "$(step_limit 75)" "$eval_bin" --model models/framezip-tiny-video \
      --pack "$pack" --policy "$policy" --device "$eval_device" --reference-device cpu \
      --max-accuracy-gap 0.5 --min-top1 0.99 --json >"$out/eval.tmp" 2>>"$out/cuda-tests.txt"
    rc=$?
    grep -v '^{' "$out/eval.tmp" >>"$out/cuda-tests.txt"
    grep '^{' "$out/eval.tmp" | tail -1 >>"$eval_reports"
    line=$(grep '^{' "$out/eval.tmp" | tail -1 | eval_verdict "$eval_device")
    rm -f "$out/eval.tmp"
    if [ "$rc" = 0 ]; then
      note "PASS GPU eval --policy $policy in $((SECONDS - t0)) s: $line"
    else
      note "FAIL GPU eval --policy $policy (exit $rc) in $((SECONDS - t0)) s: ${line:-no report}"
      status=1
    fi
  done
  return "$status"
}

# The server stage's binaries (framezip-server, framezip-kvstore, framezip-media-worker and the
# framezip CLI as the client) with every library they need that a bare CUDA image lacks, and the
# demo clip as raw RGB24 frames, into $stage_dir/server.tar.xz. The media worker links FFmpeg and
# OpenCV (even raw frames are preprocessed there), whose closure is ~250 libraries: when the
# archive and staged.tar.xz together pass what the device tool carries beside the tree, it is
# moved to $build_dir/server.tar.xz (not carried) and the stage says so.
stage_server() {
  local src="" d
  for d in "$e2e_build/bin" build-cpu/bin; do
    if [ -x "$d/framezip-server" ] && [ -x "$d/framezip" ] && [ -x "$d/framezip-media-worker" ] &&
      [ -x "$d/framezip-kvstore" ]; then
      src=$d
      break
    fi
  done
  if [ -z "$src" ]; then
    note "server stage not staged: no framezip-server, framezip, framezip-media-worker and" \
      "framezip-kvstore in $e2e_build/bin or build-cpu/bin (build them first)"
    return 0
  fi
  local tmp=$build_dir/server-stage
  rm -rf "$tmp" && mkdir -p "$tmp/server/bin" "$tmp/server/lib" "$stage_dir" || return 1
  cp "$src/framezip-server" "$src/framezip-kvstore" "$src/framezip-media-worker" "$src/framezip" \
    "$tmp/server/bin/"
  ldd "$tmp"/server/bin/* | awk '/=> \// {print $1, $3}' | sort -u |
    while read -r name path; do
      case "$name" in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | \
          libstdc++.so* | libgcc_s.so* | libcublas* | libcusolver* | libcusparse* | \
          libnvJitLink*) ;;
        *) cp -L "$path" "$tmp/server/lib/$name" ;;
      esac
    done
  if command -v ffmpeg >/dev/null; then
    ffmpeg -v error -i "$server_clip" -f rawvideo -pix_fmt rgb24 "$tmp/server/demo.rgb24" ||
      note "could not decode $server_clip to raw frames"
  fi
  tar -C "$tmp" -cJf "$stage_dir/server.tar.xz" server || return 1  # .gitignore has $stage_dir
  rm -rf "$tmp"
  local packed tree_and_stage
  packed=$(du -m "$stage_dir/server.tar.xz" | cut -f1)
  tree_and_stage=$(du -cm "$stage_dir"/*.tar.xz | tail -1 | cut -f1)
  if [ "$((tree_and_stage + 19))" -gt 64 ]; then
    mv "$stage_dir/server.tar.xz" "$build_dir/server.tar.xz"
    note "server stage packed into $build_dir/server.tar.xz (${packed} MB; with staged.tar.xz" \
      "and the ~19 MB tree over the device tool's 64 MiB carry, so NOT carried: on a bare GPU" \
      "machine the server stage skips; the media worker's FFmpeg/OpenCV closure is most of it)"
  else
    note "staged the server stage into $stage_dir/server.tar.xz (${packed} MB)"
  fi
}

# The server stage: framezip-server on the device with the shipped model behind a
# framezip-kvstore answers the demo's three questions in one session from raw frames (turns 2
# and 3 on turn 1's KV); `framezip bench server` at 1, 16 and 64 sessions; then a second server
# with no KV store and a fixed KV budget under `framezip bench sessions`. The figures go to
# $out/latest.json (bench/gpu/write_latest.py, merged over bench/gpu/latest.json) and a section
# for bench/RESULTS.md at the end of summary.txt. With --rehearse it runs on the CPU at small sizes
# (c1 and c2, a 2 MiB budget, 8-frame videos, two policies) to prove the plumbing, and writes
# nothing under bench/. Then the LLaVA-OneVision-0.5B shape (SigLIP-so400m + Qwen2-0.5B, random
# weights), written by tools/make_tiny_model.py --size 0.5b with transformers' own classes:
# `framezip bench server` at the same levels on 8 frames (its answers are noise, its timings the
# 0.5B model's), while time is left.
run_server_stage() {
  local bin_dir="" d
  for d in "$unpacked/server/bin" "$e2e_build/bin" build-cpu/bin; do
    if [ -x "$d/framezip-server" ] && [ -x "$d/framezip" ] && [ -x "$d/framezip-media-worker" ] &&
      [ -x "$d/framezip-kvstore" ]; then
      bin_dir=$d
      break
    fi
  done
  if [ -z "$bin_dir" ]; then
    note "SKIP server stage: no framezip-server, framezip-kvstore, framezip-media-worker and" \
      "framezip here (--prepare stages them into server.tar.xz when it fits the carry)"
    return 0
  fi
  [ "$bin_dir" = "$unpacked/server/bin" ] && chmod +x "$bin_dir"/*
  # The issue's 40 GiB budget is sized for the 0.5B shape's ~12 KiB of f16 KV per token; the
  # shipped model's is 4 layers x 8 KiB per 32 tokens, so 40 GiB would take >100 000 sessions to
  # fill. 64 MiB gives hundreds to thousands per policy, which 16 arrivals/s fill in minutes.
  local device=cuda levels=1,16,64 budget_mib=64 frames=64,256 policies="" rate=16
  local max_sessions=6000 bench_tokens=32 workers=(--media-workers 12 --prepare-threads 8)
  if [ "$rehearse" = 1 ]; then
    device=cpu levels=1,2 budget_mib=2 frames=8 policies="none;attentionpack:factors=int4"
    rate=8 max_sessions=40 bench_tokens=4 workers=()
  fi
  local run_libs=() lib_dir="${bin_dir%/bin}/lib"
  [ -d "$lib_dir" ] &&
    run_libs=(env "LD_LIBRARY_PATH=$repo/$lib_dir:${staged_libs:-${LD_LIBRARY_PATH:-}}")
  local work
  work=$(mktemp -d) || return 1
  local t0=$SECONDS status=0 pids=()
  # Starts a binary, its log and a port file of its own under $work; sets served_port when it
  # serves (not in a subshell: stop_all must see its pid).
  local served_port=""
  serve() {
    local name=$1
    shift
    local port_file="$work/$name.${#pids[@]}.port"
    rm -f "$port_file"  # an earlier server's, after stop_all emptied pids
    "${run_libs[@]}" "$bin_dir/$name" "$@" --listen 127.0.0.1:0 --port-file "$port_file" \
      --metrics-listen "" >>"$work/$name.log" 2>&1 &
    pids+=($!)
    local i
    for i in $(seq 600); do
      [ -s "$port_file" ] && { served_port=$(cat "$port_file"); return 0; }
      kill -0 "${pids[-1]}" 2>/dev/null || break
      sleep 0.1
    done
    tail -5 "$work/$name.log" >&2
    return 1
  }
  stop_all() {
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    pids=()
  }
  # The 0.5B shape: its model directory written here (about 40 s and 1.8 GB), a server on it
  # without a KV store, and the bench. Skipped, saying so, when the step cannot get its time.
  run_server_05b() {
    local big="$work/llava-ov-0.5b-random" budget
    budget=$(step_limit 240)
    if [ "$budget" -lt 120 ]; then
      note "SKIP server stage on the 0.5B shape: $budget s left of the step"
      return 0
    fi
    # torch and transformers: the device image's Python, or here the repository's .venv.
    local py=python3
    [ -x .venv/bin/python ] && py=.venv/bin/python
    if ! timeout 120 "$py" tools/make_tiny_model.py --arch ov-qwen2 --dtype bf16 --size 0.5b \
      --seed 0 --out "$big" >>"$out/cuda-tests.txt" 2>&1; then
      note "FAIL server stage: tools/make_tiny_model.py --size 0.5b (tail in cuda-tests.txt)"
      status=1
      return 0
    fi
    if ! serve framezip-server --model "$big" --device "$device" --kvstore none --max-frames 64 \
      --max-running 64 --max-waiting 256 --max-running-per-principal 0 \
      --max-queued-tokens-per-principal 0; then
      note "FAIL server stage: framezip-server did not start on the 0.5B shape (tail in" \
        "cuda-tests.txt)"
      tail -20 "$work/framezip-server.log" >>"$out/cuda-tests.txt"
      status=1
      stop_all
      rm -rf "$big"
      return 0
    fi
    "${run_libs[@]}" timeout "$(step_limit 180)" "$bin_dir/framezip" bench server \
      --server "127.0.0.1:$served_port" --video "$server_clip" --frames 8 \
      --concurrency "$levels" --max-tokens "$bench_tokens" --json \
      >"$work/bench-server-05b.json" 2>>"$out/cuda-tests.txt"
    local rc=$?
    if [ "$rc" = 0 ]; then
      note "PASS framezip bench server on the 0.5B shape at $levels sessions on $device:" \
        "$(grep -E '^(decode_tok_s_c|turn[12]_ttft_p50_c1)' "$work/bench-server-05b.json" |
          tr '\n' ';')"
    else
      note "FAIL framezip bench server on the 0.5B shape (exit $rc)"
      status=1
    fi
    stop_all
    # Sessions in a fixed budget on the 0.5B shape, none against AttentionPack int4. 2 GiB, not
    # the 40 GiB its KV per token was sized for: at 64 frames a session holds ~150 MiB of f16 KV,
    # so 40 GiB would take ~270 uncompressed and over 1000 compressed sessions, minutes of
    # prefill past the stage's time; 2 GiB keeps the ratio with a twentieth of the sessions.
    local budget_05b_mib=2048 frames_05b=64 policies_05b="none;attentionpack:factors=int4"
    local rate_05b=$rate max_05b=1000
    if [ "$rehearse" = 1 ]; then
      budget_05b_mib=12 frames_05b=2 rate_05b=1 max_05b=4
    fi
    if [ "$(step_limit 240)" -lt 90 ]; then
      note "SKIP framezip bench sessions on the 0.5B shape: $(step_limit 240) s left of the step"
    elif serve framezip-server --model "$big" --device "$device" --kvstore none \
      --kv-budget-bytes $((budget_05b_mib * 1024 * 1024)) --max-frames 256 --max-running 64 \
      --max-waiting 8192 --max-sessions 4096 --max-running-per-principal 0 \
      --max-queued-tokens-per-principal 0 "${workers[@]}"; then
      "${run_libs[@]}" timeout "$(step_limit 240)" "$bin_dir/framezip" bench sessions \
        --server "127.0.0.1:$served_port" --frames "$frames_05b" --policies "$policies_05b" \
        --arrival-rate "$rate_05b" --max-sessions "$max_05b" --max-tokens 8 --json \
        >"$work/bench-sessions-05b.json" 2>>"$out/cuda-tests.txt"
      rc=$?
      if [ "$rc" = 0 ]; then
        note "PASS framezip bench sessions on the 0.5B shape in ${budget_05b_mib} MiB on $device:" \
          "$(grep -E '^sessions_resident' "$work/bench-sessions-05b.json" | tr '\n' ';')"
      else
        note "FAIL framezip bench sessions on the 0.5B shape (exit $rc)"
        status=1
      fi
    else
      note "FAIL server stage: the budgeted framezip-server did not start on the 0.5B shape"
      status=1
    fi
    stop_all
    # One memory budget for weights and KV, bf16 weights then FP8 (int8 in a rehearsal: the
    # CPU's 8-bit format), uncompressed sessions: the bytes FP8 saves become sessions. 2.5 GiB
    # holds the 0.5B shape's ~1.8 GiB of bf16 weights (SigLIP tower included) and ~20 sessions of
    # 16 frames beside them. In-process servers (bench sessions --model), one per format.
    local memory_mib=2560 frames_mem=16 rate_mem=$rate max_mem=400 eight_bit=fp8
    if [ "$rehearse" = 1 ]; then
      frames_mem=2 rate_mem=1 max_mem=3 eight_bit=int8
    fi
    rm -f "$work"/bench-sessions-mem-*.json
    for format in bf16 "$eight_bit"; do
      local bits=16bit
      [ "$format" = bf16 ] || bits=8bit
      if [ "$(step_limit 150)" -lt 60 ]; then
        note "SKIP framezip bench sessions in ${memory_mib} MiB with $format weights:" \
          "$(step_limit 150) s left of the step"
        continue
      fi
      "${run_libs[@]}" timeout "$(step_limit 150)" "$bin_dir/framezip" bench sessions \
        --model "$big" --device "$device" --memory-budget-mib "$memory_mib" \
        --weight-format "$format" --frames "$frames_mem" --policies none \
        --arrival-rate "$rate_mem" --max-sessions "$max_mem" --max-running 64 --max-tokens 8 \
        --json >"$work/bench-sessions-mem-$bits.json" 2>>"$out/cuda-tests.txt"
      rc=$?
      if [ "$rc" = 0 ]; then
        note "PASS framezip bench sessions on the 0.5B shape in ${memory_mib} MiB of weights" \
          "and KV, $format weights on $device:" \
          "$(grep -E '^(weights_mib|kv_budget_mib|sessions_resident)' \
            "$work/bench-sessions-mem-$bits.json" | tr '\n' ';')"
      else
        note "FAIL framezip bench sessions in ${memory_mib} MiB with $format weights (exit $rc)"
        status=1
      fi
    done
    rm -rf "$big"
  }
  local model=models/framezip-tiny-video kv_port port
  echo "---- server stage: $bin_dir on $device ----" >>"$out/cuda-tests.txt"
  if serve framezip-kvstore --kv-host-bytes 268435456; then
    kv_port=$served_port
  else
    note "FAIL server stage: framezip-kvstore did not start (tail in cuda-tests.txt)"
    tail -20 "$work/framezip-kvstore.log" >>"$out/cuda-tests.txt"
    rm -rf "$work"
    return 1
  fi
  if serve framezip-server --model "$model" --device "$device" --kvstore "127.0.0.1:$kv_port" \
    --max-frames 256 --max-running 64 --max-waiting 256 --max-running-per-principal 0 \
    --max-queued-tokens-per-principal 0; then
    port=$served_port
  else
    note "FAIL server stage: framezip-server --device $device did not start" \
      "(tail in cuda-tests.txt)"
    tail -20 "$work/framezip-server.log" >>"$out/cuda-tests.txt"
    stop_all
    rm -rf "$work"
    return 1
  fi
  # The demo's questions in one session, the clip uploaded as raw RGB24 frames (no codec).
  local raw="$work/demo.rgb24" right="" turn2_ms=""
  if [ -f "${bin_dir%/bin}/demo.rgb24" ]; then
    raw="${bin_dir%/bin}/demo.rgb24"
  elif command -v ffmpeg >/dev/null; then
    ffmpeg -v error -i "$server_clip" -f rawvideo -pix_fmt rgb24 "$raw"
  fi
  if [ -s "$raw" ]; then
    cut -f1 "$server_questions" | "${run_libs[@]}" timeout "$(step_limit 60)" "$bin_dir/framezip" \
      chat --server "127.0.0.1:$port" --video "$raw" --raw-size 128x128 --raw-fps 10 \
      --frames 256 --max-tokens 8 --json >"$work/demo.out" 2>>"$out/cuda-tests.txt"
    local rc=$?
    local verdict
    verdict=$(python3 - "$work/demo.out" "$server_questions" <<'PY'
import json, sys
turns = json.loads(open(sys.argv[1]).read().splitlines()[-1])["turns"]
truths = [l.rstrip("\n").split("\t")[1] for l in open(sys.argv[2]) if l.strip()]
right = sum(t["answer"].strip() == want for t, want in zip(turns, truths))
reuse = all(t["cached_tokens"] > turns[0]["prompt_tokens"] - 1 for t in turns[1:])
ms = [t["ttft_s"] * 1000 for t in turns]
print(f"{right}/{len(truths)} {ms[1]:.2f} {int(reuse)} {ms[0]:.2f}")
PY
    )
    if [ "$rc" = 0 ] && [ -n "$verdict" ]; then
      read -r right turn2_ms reuse turn1_ms <<<"$verdict"
      note "server demo on $device: $right right, turn 1 TTFT $turn1_ms ms, turn 2 $turn2_ms ms" \
        "(turns 2 and 3 on turn 1's KV: $([ "$reuse" = 1 ] && echo yes || echo NO))"
      [ "$reuse" = 1 ] || status=1
    else
      note "FAIL server demo (framezip chat exit $rc)"
      status=1
    fi
  else
    note "SKIP server demo: no raw frames of $server_clip (no ffmpeg here and none staged)"
  fi
  "${run_libs[@]}" timeout "$(step_limit 240)" "$bin_dir/framezip" bench server \
    --server "127.0.0.1:$port" --video "$server_clip" --frames 64 --concurrency "$levels" \
    --max-tokens "$bench_tokens" --json >"$work/bench-server.json" 2>>"$out/cuda-tests.txt"
  local rc=$?
  if [ "$rc" = 0 ]; then
    note "PASS framezip bench server at $levels sessions on $device:" \
      "$(grep -E '^(decode_tok_s_c|turn1_over)' "$work/bench-server.json" | tr '\n' ';')"
  else
    note "FAIL framezip bench server (exit $rc)"
    status=1
  fi
  stop_all
  run_server_05b
  # Sessions in a fixed budget: no KV store, so the budget refuses rather than evicts.
  if serve framezip-server --model "$model" --device "$device" --kvstore none \
    --kv-budget-bytes $((budget_mib * 1024 * 1024)) --max-frames 256 --max-running 64 \
    --max-waiting 8192 --max-sessions $((max_sessions + 64)) --max-running-per-principal 0 \
    --max-queued-tokens-per-principal 0 "${workers[@]}"; then
    port=$served_port
    "${run_libs[@]}" timeout "$(step_limit 300)" "$bin_dir/framezip" bench sessions \
      --server "127.0.0.1:$port" --frames "$frames" ${policies:+--policies "$policies"} \
      --arrival-rate "$rate" --max-sessions "$max_sessions" --max-tokens 8 --json \
      >"$work/bench-sessions.json" 2>>"$out/cuda-tests.txt"
    rc=$?
    if [ "$rc" = 0 ]; then
      note "PASS framezip bench sessions in ${budget_mib} MiB on $device:" \
        "$(grep -E '^sessions_resident' "$work/bench-sessions.json" | tr '\n' ';')"
    else
      note "FAIL framezip bench sessions (exit $rc)"
      status=1
    fi
  else
    note "FAIL server stage: the budgeted framezip-server did not start"
    status=1
  fi
  stop_all
  grep -hv '^{' "$work/bench-server.json" "$work/bench-server-05b.json" \
    "$work/bench-sessions-05b.json" "$work/bench-sessions.json" >>"$out/cuda-tests.txt" 2>/dev/null
  local device_name
  device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  [ "$rehearse" = 1 ] && device_name="REHEARSAL on the CPU: $(lscpu | sed -n 's/^Model name: *//p')"
  local base=bench/gpu/latest.json
  [ "$rehearse" = 1 ] && base="$work/none.json"  # a rehearsal's CPU figures start afresh
  local args=("$out/latest.json" --device "${device_name:-unknown GPU}" --base "$base"
    --sessions-kv-budget-mib "$budget_mib")
  [ -n "$right" ] && args+=(--demo-right "$right" --demo-turn2-ttft-ms "$turn2_ms")
  [ -s "$work/bench-server.json" ] && args+=(--server-report "$work/bench-server.json")
  grep -qs '^{' "$work/bench-server-05b.json" &&
    args+=(--server-05b-report "$work/bench-server-05b.json")
  grep -qs '^{' "$work/bench-sessions-05b.json" &&
    args+=(--sessions-05b-report "$work/bench-sessions-05b.json")
  [ -s "$work/bench-sessions.json" ] && args+=(--sessions-report "$work/bench-sessions.json")
  grep -qs '^{' "$work/bench-sessions-mem-16bit.json" &&
    grep -qs '^{' "$work/bench-sessions-mem-8bit.json" &&
    args+=(--sessions-weights-reports "$work/bench-sessions-mem-16bit.json"
      "$work/bench-sessions-mem-8bit.json")
  if python3 bench/gpu/write_latest.py "${args[@]}"; then
    {
      echo "## GPU serving check ($(date -u +%F), ${device_name:-unknown GPU})"
      echo
      echo "scripts/gpu-check.sh's server stage: framezip-server --device $device, the shipped"
      echo "model, behind framezip-kvstore; \`framezip bench server --concurrency $levels\`;"
      echo "\`framezip bench sessions\` in a ${budget_mib} MiB KV budget (no KV store)."
      echo
      echo '```json'
      cat "$out/latest.json"
      echo '```'
    } >>"$summary"
    # On a GPU the figures also land in the tree the run was carried with (the integrator copies
    # $out/latest.json to bench/gpu/latest.json and the section above into bench/RESULTS.md).
    [ "$rehearse" = 1 ] || cp "$out/latest.json" bench/gpu/latest.json
    note "server stage figures in latest.json and below ($((SECONDS - t0)) s)"
  else
    note "FAIL could not write latest.json"
    status=1
  fi
  rm -rf "$work"
  return "$status"
}

# The GPU check's figures into $out/latest.json (bench/gpu/write_latest.py): from bench-gpu.json,
# torch-peer.json and the GPU eval's reports, whichever this run wrote, merged over the server
# stage's $out/latest.json when it ran, else over bench/gpu/latest.json (a rehearsal's CPU
# figures start afresh). Keys it leaves out, and why, go to summary.txt; on a GPU the file is
# copied to bench/gpu/latest.json as the server stage's is.
write_gpu_latest() {
  local args=() device_name base=bench/gpu/latest.json msgs rc line
  [ -s "$out/bench-gpu.json" ] && args+=(--bench-gpu-report "$out/bench-gpu.json")
  [ -s "$out/torch-peer.json" ] && args+=(--torch-peer-report "$out/torch-peer.json")
  [ -s "$eval_reports" ] && args+=(--eval-report "$eval_reports")
  [ "${#args[@]}" = 0 ] && return 0
  device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  if [ "$rehearse" = 1 ]; then
    device_name="REHEARSAL on the CPU: $(lscpu | sed -n 's/^Model name: *//p')"
    base="$build_dir/no-base.json"
  fi
  [ -s "$out/latest.json" ] && base="$out/latest.json"
  msgs=$(python3 bench/gpu/write_latest.py "$out/latest.json" \
    --device "${device_name:-unknown GPU}" --base "$base" "${args[@]}" 2>&1)
  rc=$?
  [ -n "$msgs" ] && while IFS= read -r line; do note "$line"; done <<<"$msgs"
  if [ "$rc" != 0 ]; then
    note "FAIL could not write the GPU figures into latest.json"
    return 1
  fi
  {
    echo "## GPU check figures ($(date -u +%F), ${device_name:-unknown GPU})"
    echo
    echo "scripts/gpu-check.sh: bench/gpu/write_latest.py over ${args[*]}"
    echo
    echo '```json'
    cat "$out/latest.json"
    echo '```'
  } >>"$summary"
  [ "$rehearse" = 1 ] || cp "$out/latest.json" bench/gpu/latest.json
  note "GPU figures in latest.json (above)"
}

# The server stage when $1 s of the 450 s budget are left; otherwise a note to run it alone.
run_server_stage_if_time() {
  if [ $((450 - SECONDS)) -lt "$1" ]; then
    note "SKIP server stage: $((450 - SECONDS)) s left of 450 (it needs ~$1 s); run" \
      "scripts/gpu-check.sh --server-only$([ "$rehearse" = 1 ] && echo " --rehearse")"
    return 0
  fi
  run_server_stage
}

# Nsight Compute over the first launches of the kernels whose names match $1 (a regex) in
# `framezip bench gpu --quick`: each kernel's duration, throughput, occupancy and launch shape
# into ncu.txt, in place of every other step (a diagnostic run, not a check).
run_profile() {
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null |
    head -1)
  [ -n "$ncu" ] || { note "FAIL profile: no ncu on this machine"; return 1; }
  local t0=$SECONDS
  with_libs timeout "$(step_limit 300)" "$ncu" --kernel-name "regex:$1" --launch-count 8 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section WarpStateStats \
    "$bench_bin" --quick >"$out/ncu.txt" 2>&1
  local rc=$?
  note "profile of kernels /$1/ (exit $rc) in $((SECONDS - t0)) s: ncu.txt"
  return "$rc"
}

# Runs a command with the staged libraries first on the library path (when running staged
# binaries), leaving the rest of the script's environment alone.
with_libs() {
  if [ -n "${staged_libs:-}" ]; then
    LD_LIBRARY_PATH="$staged_libs" "$@"
  else
    "$@"
  fi
}

# Seconds a step may take: its own cap, or what is left of the 450 s budget (at least 10).
step_limit() {
  local left=$((450 - SECONDS))
  [ "$left" -lt 10 ] && left=10
  echo $(($1 < left ? $1 : left))
}

# compute-sanitizer memcheck over the [cuda] tests, with whatever time is left (slow: 10-100x).
run_sanitizer() {
  local cs
  cs=$(command -v compute-sanitizer || { [ -x /usr/local/cuda/bin/compute-sanitizer ] &&
    echo /usr/local/cuda/bin/compute-sanitizer; })
  [ -n "$cs" ] || { note "SKIP memcheck: no compute-sanitizer"; return 0; }
  local limit=$((450 - SECONDS))
  [ "$limit" -lt 45 ] && { note "SKIP memcheck: only ${limit} s left"; return 0; }
  local t0=$SECONDS
  # Caching off, so an overrun past a temporary is reported instead of landing in a neighbouring
  # block of a cached segment (engine/core/device_memory_cuda.cc).
  # API errors are not reported: the [cuda] tests check every CUDA result themselves, and one
  # test provokes cudaErrorMemoryAllocation on purpose (the out-of-memory path).
  FRAMEZIP_NO_CUDA_MEMORY_CACHING=1 \
    with_libs timeout "$limit" "$cs" --tool memcheck --report-api-errors no --error-exitcode 3 \
    "$bin" "[cuda]" \
    >"$out/memcheck.tmp" 2>&1
  local rc=$?
  echo "---- compute-sanitizer memcheck (last 30 lines) ----"
  tail -30 "$out/memcheck.tmp"
  rm -f "$out/memcheck.tmp"
  case "$rc" in
    0) note "PASS memcheck over the [cuda] tests in $((SECONDS - t0)) s" ;;
    124) note "memcheck stopped after $((SECONDS - t0)) s (time budget): no verdict" ;;
    3) note "FAIL memcheck found errors (tail in gpu-check.log)"; return 1 ;;
    *) note "memcheck exit $rc after $((SECONDS - t0)) s (tests failed or the tool refused)" ;;
  esac
  return 0
}

# `framezip bench gpu --json` and torch_peer.py: the JSON objects (their last lines) go to their
# files, the readable lines to this log. Then dense prefill vs torch SDPA (target >= 0.5x,
# docs/architecture.md §8).
run_benchmarks() {
  local ok=0 t0 rc extra=()
  [ "$quick" = 1 ] && extra=(--quick)
  t0=$SECONDS
  if [ -x "$bench_bin" ]; then
    with_libs timeout "$(step_limit 200)" "$bench_bin" --json "${extra[@]}" | tee "$out/bench-gpu.tmp"
    rc=${PIPESTATUS[0]}
    tail -1 "$out/bench-gpu.tmp" | grep '^{' >"$out/bench-gpu.json" || rm -f "$out/bench-gpu.json"
    rm -f "$out/bench-gpu.tmp"
    if [ "$rc" = 0 ] && [ -s "$out/bench-gpu.json" ]; then
      note "PASS framezip bench gpu in $((SECONDS - t0)) s (bench-gpu.json)"
    else
      note "FAIL framezip bench gpu (exit $rc) after $((SECONDS - t0)) s"
      ok=1
    fi
  else
    note "FAIL framezip bench gpu: no binary at $bench_bin"
    ok=1
  fi
  t0=$SECONDS
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout "$(step_limit 110)" python3 bench/gpu/torch_peer.py "${extra[@]}" \
      --out "$out/torch-peer.json"
    rc=$?
    if [ "$rc" = 0 ]; then
      note "PASS torch_peer.py in $((SECONDS - t0)) s (torch-peer.json)"
    else
      note "FAIL torch_peer.py (exit $rc) after $((SECONDS - t0)) s"
      ok=1
    fi
  else
    note "SKIP torch_peer.py: python3 has no torch that sees a GPU"
  fi
  if [ -s "$out/bench-gpu.json" ] && [ -s "$out/torch-peer.json" ]; then
    python3 - "$out/bench-gpu.json" "$out/torch-peer.json" <<'EOF' | tee -a "$summary"
import json, re, sys
ours = {r["name"]: r["value"] for r in json.load(open(sys.argv[1]))["results"]}
peer = {r["name"]: r["value"] for r in json.load(open(sys.argv[2]))["results"]}
for name, value in ours.items():
    m = re.match(r"dense causal prefill attention "
                 r"(f32|bf16 tensor cores pipelined|bf16 tensor cores) (.*T=\d+)$", name)
    if not m:
        continue
    ref = peer.get(f"torch SDPA causal bf16 {m.group(2)}")
    if ref:
        print(f"dense prefill {m.group(2)}: ours ({m.group(1)}) {value:.2f} vs torch SDPA bf16 "
              f"{ref:.1f} TFLOP/s = {value / ref:.3f}x (target >= 0.5)")
# The vision tower rows: same frames, batches and direction of copies on both sides.
for name, value in ours.items():
    m = re.match(r"end-to-end vision tower, SigLIP-so400m \(OV\) bf16, 384 px, (\d+) frames", name)
    if not m:
        continue
    for peer_name, ref in peer.items():
        if peer_name.startswith("torch eager SigLIP-so400m") and f" {m.group(1)} frames" in peer_name:
            print(f"vision tower {m.group(1)} frames: ours {value:.1f} vs torch eager {ref:.1f} "
                  f"frames/s = {value / ref:.3f}x")
# End-to-end decode against both torch peers, only at the same batch and context.
for name, value in ours.items():
    m = re.fullmatch(r"end-to-end decode batch (\d+) at (\d+) context( \(aggregate\))?", name)
    if not m:
        continue
    batch, ctx = m.group(1), m.group(2)
    for peer_kind, prefix in (("graphs", "torch static-cache CUDA-graph"), ("eager", "torch eager")):
        ref = peer.get(f"{prefix} Qwen2-0.5B-shaped decode bf16 batch {batch} ctx {ctx}")
        if ref:
            print(f"decode batch {batch} at {ctx} context: ours {value:.0f} vs torch {peer_kind} "
                  f"{ref:.0f} tokens/s = {value / ref:.3f}x")
        else:
            print(f"decode batch {batch} at {ctx} context: ours {value:.0f} tokens/s; no torch "
                  f"{peer_kind} row at that batch and context")
EOF
  fi
  return "$ok"
}

# Everything is shown and logged; the pipeline keeps main's exit status.
main 2>&1 | tee -a "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
