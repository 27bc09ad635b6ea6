#!/usr/bin/env bash
# Installs the Debian 12 packages framezip needs to build and test, when any is missing.
# Idempotent: when everything is installed it only checks (well under a second) and says nothing.
# Runs apt-get through sudo when not root.
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config make
  # RPC, serialization, logging, config, metrics
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev libssl-dev
  libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev prometheus-cpp-dev
  # the OpenAI-compatible HTTP API: Boost.Beast over Asio (header-only)
  libboost-dev
  # engine: BLAS; tokenizer: Oniguruma regexes (what HF tokenizers uses) and utf8proc (NFC)
  libopenblas-dev libonig-dev libutf8proc-dev
  # media: FFmpeg libraries and the ffmpeg tool (tests generate their videos), OpenCV pieces
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
  # kvstore: Redis client, and the server for the Redis tier's tests
  libhiredis-dev redis-server
  # media: the sandboxed media workers' syscall filter
  libseccomp-dev
  # tests (python3-grpcio: the Python client example runs against the server in `make test`;
  # openssl: the TLS test and the chart test make their certificates with the command-line tool)
  catch2 python3-grpcio python3-protobuf openssl
  # deployment tests: Prometheus and promtool evaluate the dashboard's and the alerts' queries
  # against a real server; python3-venv makes .venv-deploy/ for the chart test (helm-python-sdk)
  prometheus python3-venv
  # synthvid v2 (tools/synthvid/synthvid2.py) runs on Debian's python3 with these alone: the
  # eval generates its split with them, tests/tools/test_synthvid2.py tests it
  python3-numpy python3-av python3-pil
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${#missing[@]} Debian packages: ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts redis-server and prometheus as system services on install; our tests start
# their own on free ports (Prometheus with its own storage in a temporary folder), so leave the
# system ones alone.
echo "install-deps: done"
