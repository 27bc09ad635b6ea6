// framezip-server: the gRPC front of framezip (docs/architecture.md §5).
//
// Serves framezip.v1.VideoChat, grpc.health.v1 and reflection; Prometheus metrics on their own
// port; drains on SIGTERM (health NOT_SERVING, new turns UNAVAILABLE, in-flight turns finish
// within --grace-seconds or are cancelled, session KV flushed to the store, exit 0).
// Configuration: docs/configuration.md, or `framezip-server --help`.
#include "engine/ops/blas_core.h"
#include "server/engine_factory.h"
#include "server/server_main.h"

int main(int argc, char** argv) {
  // Before any work: may restart this program once with OpenBLAS on the CPU's fast kernels.
  framezip::engine::ops::cpu::ReexecWithFasterBlasCore(argv);
  return framezip::server::RunServerMain(argc, argv, framezip::server::CreateEngine);
}
