#!/usr/bin/env bash
# Runs every registered test of a build directory with CTest. Tests labelled `cuda` need a GPU:
# where none is present they are left out, and this script says how many and why.
#
#   scripts/run-tests.sh BUILD_DIR [TEST_BINARY ...]
# With test binaries named, only their cases run (a sanitizer stage that builds a subset).
set -euo pipefail
build_dir=${1:-build}
shift || true
only=("$@")
cd "$build_dir"

# Every Catch2 test case of every test binary must be registered with CTest, or it never runs.
# CMake finds them by parsing the sources (ParseAndAddCatchTests), which misses a name split
# into adjacent string literals; each binary's own list is the truth.
registered=$(ctest -N)
unregistered=0
bins=(tests/*_test)
if [ ${#only[@]} -gt 0 ]; then
  bins=("${only[@]/#/tests/}")
fi
for bin in "${bins[@]}"; do
  [ -x "$bin" ] || { [ ${#only[@]} -eq 0 ] && continue; echo "run-tests: $bin was not built" >&2; exit 1; }
  name=$(basename "$bin")
  while IFS= read -r test; do
    [ -n "$test" ] || continue
    if ! grep -qF "$name:$test" <<<"$registered" && ! grep -qF "$name:${test//,/\\,}" <<<"$registered"; then
      echo "run-tests: '$test' of $name is not registered with CTest (write its name as one string literal: clang-format splits names over 100 columns)" >&2
      unregistered=$((unregistered + 1))
    fi
  done < <("$bin" --list-test-names-only 2>/dev/null)
done
if [ "$unregistered" -gt 0 ]; then
  echo "run-tests: $unregistered test cases would never run" >&2
  exit 1
fi

exclude=()
gpu_json=$(./bin/framezip devices --json 2>/dev/null || echo '{"cuda_devices": 0}')
if ! grep -q '"cuda_devices": [1-9]' <<<"$gpu_json"; then
  n=$(ctest -N -L cuda 2>/dev/null | sed -n 's/^Total Tests: //p')
  reason=$({ ./bin/framezip devices 2>/dev/null || true; } | sed -n 's/^(no GPU: \(.*\))$/\1/p')
  # A subset build (make test-tsan) has no framezip CLI to ask.
  [ -x ./bin/framezip ] || reason="this build has no framezip CLI to ask"
  echo "run-tests: no GPU here (${reason:-unknown}); leaving out the ${n:-0} tests labelled cuda"
  exclude=(-LE cuda)
fi
if [ ${#only[@]} -gt 0 ]; then
  pattern=$(IFS='|'; echo "${only[*]}")
  exclude+=(-R "^(${pattern})(:|$)")
fi
exec ctest --output-on-failure -j "$(nproc)" --timeout 600 "${exclude[@]}"
