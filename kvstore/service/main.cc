// framezip-kvstore: the tiered KV block store (host RAM, disk, Redis) as a gRPC service that
// several framezip servers share (framezip.v1.KvStore), with its own Prometheus /metrics.
//
//   framezip-kvstore --listen 0.0.0.0:50061 --metrics-listen 0.0.0.0:9466
//       --kv-host-bytes 8589934592 --kv-disk-path /var/lib/framezip/kv --kv-redis 10.0.0.5:6379
//
// SIGTERM/SIGINT drain: health goes NOT_SERVING, in-flight calls get --grace-seconds, then the
// store closes (write-back blocks are flushed, the disk tier synced). Exit codes: 0 clean, 1 a
// runtime failure (cannot listen, cannot open the store), 2 bad flags.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "common/flags.h"
#include "common/logging.h"
#include "kvstore/prometheus_metrics.h"
#include "kvstore/service/kvstore_service.h"
#include "kvstore/store_flags.h"
#include "kvstore/tiered_store.h"

namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Writes "<port>\n" atomically (tests poll for the file and must never read half of it).
void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << port << "\n"; }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) FZ_LOG_ERROR("cannot write {}: {}", path, ec.message());
}

}  // namespace

int main(int argc, char** argv) {
  // Block termination signals before any thread starts; main waits for them with sigwait.
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::string listen = "0.0.0.0:50061";
  std::string port_file;
  std::string metrics_listen = "0.0.0.0:9466";
  std::string metrics_port_file;
  int grace_seconds = 10;
  int compact_interval_seconds = 60;
  int test_put_delay_ms = 0;
  std::string log_level = "info";
  std::string log_format = "text";
  framezip::kvstore::StoreFlags store_flags;
  framezip::FlagSet flags("framezip-kvstore",
                          "Serves the tiered KV block store (framezip.v1.KvStore) over gRPC.");
  flags.String("listen", &listen, "gRPC address; port 0 picks a free one", "ADDR");
  flags.String("port-file", &port_file, "write the bound gRPC port here once serving", "FILE");
  flags.String("metrics-listen", &metrics_listen,
               "Prometheus /metrics address (empty = off); port 0 picks a free one", "ADDR");
  flags.String("metrics-port-file", &metrics_port_file, "write the bound metrics port here",
               "FILE");
  flags.Int("grace-seconds", &grace_seconds, "drain time on SIGTERM before calls are cancelled");
  flags.Int("compact-interval-seconds", &compact_interval_seconds,
            "how often to compact the disk tier (0 = only under space pressure)");
  flags.Int("test-put-delay-ms", &test_put_delay_ms,
            "testing: answer every Put this many milliseconds late, as a slow store would "
            "(0 = off)");
  flags.String("log-level", &log_level, "trace|debug|info|warn|error", "LEVEL");
  flags.String("log-format", &log_format, "text|json", "FORMAT");
  framezip::kvstore::RegisterStoreFlags(flags, &store_flags);

  framezip::Status status = flags.ApplyEnvironment();
  if (status.ok()) status = flags.Parse(framezip::ArgsFrom(argc, argv));
  if (framezip::FlagSet::IsHelp(status)) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  framezip::LoggingOptions logging{log_level, framezip::LogFormat::kText};
  if (status.ok()) {
    auto format = framezip::ParseLogFormat(log_format);
    status = format.status();
    if (format.ok()) logging.format = *format;
  }
  if (status.ok()) status = framezip::InitLogging(logging);
  if (status.ok() && test_put_delay_ms < 0) {
    status =
        framezip::InvalidArgumentError("--test-put-delay-ms: {} is negative", test_put_delay_ms);
  }
  if (status.ok() && !store_flags.address.empty()) {
    status = framezip::InvalidArgumentError("--kv-address is for clients of a shared store");
  }
  auto registry = std::make_shared<prometheus::Registry>();
  framezip::kvstore::PrometheusStoreMetrics metrics(*registry);
  framezip::StatusOr<framezip::kvstore::TieredStoreOptions> options =
      status.ok() ? framezip::kvstore::TieredStoreOptionsFrom(store_flags, &metrics)
                  : framezip::StatusOr<framezip::kvstore::TieredStoreOptions>(status);
  if (!options.ok()) {
    std::fprintf(stderr, "framezip-kvstore: %s\n", framezip::MessageOf(options.status()).c_str());
    return 2;
  }

  auto store = framezip::kvstore::TieredStore::Open(*options);
  if (!store.ok()) {
    FZ_LOG_ERROR("cannot open the store: {}", framezip::MessageOf(store.status()));
    return 1;
  }

  std::unique_ptr<prometheus::Exposer> exposer;
  if (!metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_listen);
      exposer->RegisterCollectable(registry);
      const auto ports = exposer->GetListeningPorts();
      if (!ports.empty()) WritePortFile(metrics_port_file, ports.front());
      FZ_LOG_INFO("metrics on {} (port {})", metrics_listen, ports.empty() ? 0 : ports.front());
    } catch (const std::exception& e) {
      FZ_LOG_ERROR("cannot serve metrics on {}: {}", metrics_listen, e.what());
      return 1;
    }
  }

  framezip::kvstore::service::KvStoreService service(
      store->get(), {.max_block_bytes = options->max_block_bytes,
                     .chunk_bytes = 1 << 20,
                     .test_put_delay = std::chrono::milliseconds(test_put_delay_ms)});
  if (test_put_delay_ms > 0)
    FZ_LOG_WARN("testing: every Put is delayed by {} ms", test_put_delay_ms);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  framezip::kvstore::service::ConfigureServerBuilder(builder);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    FZ_LOG_ERROR("cannot listen on {}", listen);
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  FZ_LOG_INFO("framezip-kvstore serving on port {}", port);
  WritePortFile(port_file, port);

  // Background compaction of dead disk records.
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread compactor([&] {
    if (compact_interval_seconds <= 0) return;
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, std::chrono::seconds(compact_interval_seconds),
                        [&] { return stopping; })) {
      lock.unlock();
      if (auto n = (*store)->CompactDisk(); !n.ok()) {
        FZ_LOG_WARN("compaction: {}", framezip::MessageOf(n.status()));
      } else if (*n > 0) {
        FZ_LOG_INFO("compacted {} disk segments", *n);
      }
      lock.lock();
    }
  });

  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  FZ_LOG_INFO("signal {}: draining (grace {} s)", sig, grace_seconds);
  server->GetHealthCheckService()->SetServingStatus(false);
  const auto grace_end = std::chrono::steady_clock::now() + std::chrono::seconds(grace_seconds);
  while (service.in_flight() > 0 && std::chrono::steady_clock::now() < grace_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (service.in_flight() > 0)
    FZ_LOG_WARN("cancelling {} calls still running", service.in_flight());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  cv.notify_all();
  compactor.join();
  store->reset();  // flushes write-back blocks, syncs the disk tier
  // Stop the metrics endpoint last, and properly (civetweb joins its threads, ~1.5 s): leaking it
  // would hide real leaks from LeakSanitizer in the asan build.
  exposer.reset();
  FZ_LOG_INFO("framezip-kvstore stopped");
  return 0;
}
