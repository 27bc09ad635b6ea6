#!/usr/bin/env bash
# Runs every registered test of a build directory with CTest. Tests labelled `cuda` need a GPU:
# where none is present they are left out, and this script says how many and why.
set -euo pipefail
build_dir=${1:-build}
cd "$build_dir"

exclude=()
gpu_json=$(./bin/framezip devices --json 2>/dev/null || echo '{"cuda_devices": 0}')
if ! grep -q '"cuda_devices": [1-9]' <<<"$gpu_json"; then
  n=$(ctest -N -L cuda 2>/dev/null | sed -n 's/^Total Tests: //p')
  reason=$(./bin/framezip devices 2>/dev/null | sed -n 's/^(no GPU: \(.*\))$/\1/p')
  echo "run-tests: no GPU here (${reason:-unknown}); leaving out the ${n:-0} tests labelled cuda"
  exclude=(-LE cuda)
fi
exec ctest --output-on-failure -j "$(nproc)" --timeout 600 "${exclude[@]}"
