// framezip bench kvstore: put/get throughput and p50/p99 latency of the KV block store for
// 1 MiB blocks, per tier, embedded and over loopback gRPC.
//
//   embedded_host_*        TieredStore with only the host-RAM tier
//   embedded_disk_block_*  only the disk tier, fsync per block (Put returns after fdatasync)
//   embedded_disk_off_*    only the disk tier, no fsync (page cache)
//   embedded_redis_*       only the Redis tier (a redis-server this bench starts on a free
//                          loopback port, or --redis ADDR); skipped when there is none
//   grpc_host_*            RemoteStore -> KvStoreService on 127.0.0.1 (in this process, a real
//                          TCP loopback connection) -> host tier
//   grpc_disk_block_*      the same, disk tier with fsync per block
// One client, sequential calls: throughput = bytes / total time of the calls. Disk gets read
// blocks just written, so they come from the page cache (what a turn restore usually sees).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "common/flags.h"
#include "kvstore/block_key.h"
#include "kvstore/service/kvstore_service.h"
#include "kvstore/service/remote_store.h"
#include "kvstore/tiered_store.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

extern char** environ;

namespace framezip::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kvstore::BlockKey;

BlockKey BenchKey(int run, int i) {
  kvstore::BlockKeyInput input{"bench", "kvstore", {}, {}};
  const std::vector<int32_t> tokens = {run, i};
  input.token_ids = tokens;
  return kvstore::ChainBlockKey(kvstore::kRootBlockKey, input);
}

struct Timings {
  std::vector<double> seconds;
  double Total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
  double Percentile(double p) const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    const size_t i = std::min(s.size() - 1, static_cast<size_t>(p * static_cast<double>(s.size())));
    return s[i];
  }
};

// Times `blocks` puts then `blocks` gets; reports MiB/s and p50/p99 ms for each.
Status Measure(kvstore::KvStore& store, const std::string& name, int run, int blocks,
               size_t block_bytes, bench::Report& report) {
  std::string payload(block_bytes, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 131 + run) >> 3);
  Timings put, get;
  for (int i = 0; i < blocks; ++i) {
    payload[0] = static_cast<char>(i);  // distinct content per block
    std::string bytes = payload;
    const auto start = Clock::now();
    auto r = store.Put(BenchKey(run, i), std::move(bytes), {.precision = kvstore::Precision::kInt4});
    put.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (!r.ok()) return Annotate(r.status(), name + " put");
  }
  for (int i = 0; i < blocks; ++i) {
    const auto start = Clock::now();
    auto r = store.Get(BenchKey(run, i), {.promote = false});
    get.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (!r.ok()) return Annotate(r.status(), name + " get");
    if ((*r).bytes->size() != block_bytes) return InternalError("{}: short block", name);
  }
  const double mib = static_cast<double>(block_bytes) * blocks / (1 << 20);
  for (auto& [op, t] : {std::pair<const char*, Timings*>{"put", &put}, {"get", &get}}) {
    report.Add({fmt::format("{}_{}_MiBps", name, op), mib / t->Total(), "MiB/s", {}, false});
    report.Add({fmt::format("{}_{}_p50_ms", name, op), t->Percentile(0.5) * 1e3, "ms", {}, true});
    report.Add({fmt::format("{}_{}_p99_ms", name, op), t->Percentile(0.99) * 1e3, "ms", {}, true});
  }
  return absl::OkStatus();
}

// A redis-server on a free loopback port for the duration of the bench.
class BenchRedis {
 public:
  bool Start(const fs::path& dir) {
    for (int attempt = 0; attempt < 3 && pid_ <= 0; ++attempt) {
      port_ = 20000 + static_cast<int>(Clock::now().time_since_epoch().count() % 30000);
      const std::string port = std::to_string(port_);
      std::vector<std::string> argv = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no", "--dir", dir.string(),
                                       "--logfile", (dir / "redis.log").string()};
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, args.data(), environ) != 0) {
        pid_ = -1;
        return false;
      }
      kvstore::RedisTierOptions o;
      o.port = port_;
      o.backoff_initial = std::chrono::milliseconds(10);
      o.backoff_max = std::chrono::milliseconds(50);
      kvstore::RedisTier probe(o, &kvstore::NullStoreMetrics());
      const auto deadline = Clock::now() + std::chrono::seconds(5);
      while (Clock::now() < deadline && !probe.TtlOf(BenchKey(0, 0)).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!probe.TtlOf(BenchKey(0, 0)).ok()) Stop();
    }
    return pid_ > 0;
  }
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  ~BenchRedis() { Stop(); }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

StatusOr<std::unique_ptr<kvstore::TieredStore>> OpenOnly(
    std::optional<kvstore::HostTierOptions> host, std::optional<kvstore::DiskTierOptions> disk,
    std::optional<kvstore::RedisTierOptions> redis) {
  kvstore::TieredStoreOptions o;
  o.host = host;
  o.disk = disk;
  o.redis = redis;
  return kvstore::TieredStore::Open(o);
}

}  // namespace

int RunBenchKvstore(const std::vector<std::string>& args) {
  bool json = false;
  int blocks = 64;
  int64_t block_bytes = 1 << 20;
  std::string dir = (fs::temp_directory_path() / "framezip-bench-kvstore").string();
  std::string redis_address;
  bool no_redis = false;
  FlagSet flags("framezip bench kvstore",
                "Put/get throughput and p50/p99 latency of the KV store per tier, embedded and "
                "over loopback gRPC.");
  flags.Bool("json", &json, "print one JSON object as the last line");
  flags.Int("blocks", &blocks, "blocks per measurement");
  flags.Int("block-bytes", &block_bytes, "bytes per block");
  flags.String("dir", &dir, "scratch directory for the disk tier (emptied first)", "DIR");
  flags.String("redis", &redis_address, "use this Redis instead of starting redis-server",
               "HOST:PORT");
  flags.Bool("no-redis", &no_redis, "skip the Redis tier");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (blocks < 2 || block_bytes < 1) {
    std::fprintf(stderr, "framezip bench kvstore: --blocks >= 2 and --block-bytes >= 1\n");
    return 2;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  const uint64_t bytes = static_cast<uint64_t>(block_bytes);
  const uint64_t room = bytes * static_cast<uint64_t>(blocks) * 4;
  bench::Machine machine = bench::DetectMachine();
  machine.threads = 1;
  bench::Report report("kvstore", machine);
  int run = 0;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip bench kvstore: %s\n", MessageOf(s).c_str());
    return 1;
  };
  auto disk = [&](const std::string& sub, kvstore::FsyncPolicy fsync) {
    kvstore::DiskTierOptions d;
    d.dir = fs::path(dir) / sub;
    d.capacity_bytes = room;
    d.fsync = fsync;
    return d;
  };

  // Embedded, per tier.
  {
    auto store = OpenOnly(kvstore::HostTierOptions{room}, std::nullopt, std::nullopt);
    if (!store.ok()) return fail(store.status());
    if (auto s = Measure(**store, "embedded_host", ++run, blocks, bytes, report); !s.ok()) {
      return fail(s);
    }
  }
  for (auto [name, policy] : {std::pair{"block", kvstore::FsyncPolicy::kPerBlock},
                              std::pair{"off", kvstore::FsyncPolicy::kOff}}) {
    auto store = OpenOnly(std::nullopt, disk(std::string("disk_") + name, policy), std::nullopt);
    if (!store.ok()) return fail(store.status());
    if (auto s = Measure(**store, std::string("embedded_disk_") + name, ++run, blocks, bytes,
                         report);
        !s.ok()) {
      return fail(s);
    }
  }
  BenchRedis redis_server;
  std::optional<kvstore::RedisTierOptions> redis;
  if (!no_redis) {
    kvstore::RedisTierOptions r;
    if (!redis_address.empty()) {
      if (auto s = kvstore::ParseRedisAddress(redis_address, &r); !s.ok()) return fail(s);
      redis = r;
    } else if (redis_server.Start(dir)) {
      r.port = redis_server.port();
      redis = r;
    } else {
      std::printf("redis-server not available: Redis tier skipped\n");
    }
  }
  if (redis) {
    auto store = OpenOnly(std::nullopt, std::nullopt, redis);
    if (!store.ok()) return fail(store.status());
    if (auto s = Measure(**store, "embedded_redis", ++run, blocks, bytes, report); !s.ok()) {
      return fail(s);
    }
  }

  // Over loopback gRPC: RemoteStore -> KvStoreService -> TieredStore.
  for (auto [name, with_disk] : {std::pair{"grpc_host", false}, std::pair{"grpc_disk_block", true}}) {
    auto store = with_disk ? OpenOnly(std::nullopt, disk("grpc_disk", kvstore::FsyncPolicy::kPerBlock),
                                      std::nullopt)
                           : OpenOnly(kvstore::HostTierOptions{room}, std::nullopt, std::nullopt);
    if (!store.ok()) return fail(store.status());
    kvstore::service::KvStoreService service(store->get(), {});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    kvstore::service::ConfigureServerBuilder(builder);
    auto server = builder.BuildAndStart();
    if (!server || port == 0) return fail(UnavailableError("cannot listen on 127.0.0.1:0"));
    auto client = kvstore::service::RemoteStore::Connect(
        {.address = fmt::format("127.0.0.1:{}", port),
         .connect_timeout = std::chrono::milliseconds(5000)});
    if (!client.ok()) return fail(client.status());
    auto s = Measure(**client, name, ++run, blocks, bytes, report);
    server->Shutdown(std::chrono::system_clock::now());
    if (!s.ok()) return fail(s);
  }
  fs::remove_all(dir, ec);
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
