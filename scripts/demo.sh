#!/usr/bin/env bash
# `make demo`: the main job on the embedded default (CPU, the in-process KV store), printing each
# step. It grows with the project: today it starts framezip-server, checks that it serves, and
# drains it with SIGTERM.
set -euo pipefail
build_dir=${1:-build}
bin="$build_dir/bin"
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

step "framezip build"
"$bin/framezip" version
"$bin/framezip" devices

step "start framezip-server on a free loopback port"
"$bin/framezip-server" --listen 127.0.0.1:0 --port-file "$work/port" --grace-seconds 5 \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/server.log"; echo "demo: server did not start" >&2; exit 1; }
port=$(cat "$work/port")
echo "serving on 127.0.0.1:$port"

step "gRPC health check"
"$bin/framezip" health --server "127.0.0.1:$port"

step "SIGTERM: drain and exit"
kill -TERM "$server_pid"
wait "$server_pid"
code=$?
server_pid=""
sed 's/^/  server: /' "$work/server.log"
echo "framezip-server exited with $code"
echo
echo "demo: done"
