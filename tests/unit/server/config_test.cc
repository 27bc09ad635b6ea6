// Server configuration: defaults < YAML < FRAMEZIP_* environment < flags, with errors that name
// the key, variable or flag.
#include "server/config.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace framezip::server {
namespace {

TEST_CASE("config layers: YAML, then environment, then flags", "[unit][server]") {
  testing::TempDir dir;
  std::ofstream(dir / "server.yaml") << "listen: 127.0.0.1:7000\nmax_running: 4\n"
                                        "max-waiting: 9\ndefault_policy: zipvl\n";
  const std::string file = (dir / "server.yaml").string();
  setenv("FRAMEZIP_MAX_RUNNING", "6", 1);
  auto load = LoadServerConfig({"--config", file, "--max-waiting", "11"});
  unsetenv("FRAMEZIP_MAX_RUNNING");
  REQUIRE(load.ok());
  CHECK(load->config.listen == "127.0.0.1:7000");  // YAML over the default
  CHECK(load->config.max_running == 6);            // environment over YAML
  CHECK(load->config.max_waiting == 11);           // flag over YAML
  CHECK(load->config.default_policy == "zipvl");
  CHECK(load->config.grace_seconds == 30);  // untouched default
}

TEST_CASE("config errors name the key or flag", "[unit][server]") {
  testing::TempDir dir;
  std::ofstream(dir / "bad.yaml") << "no_such_setting: 1\n";
  auto bad_key = LoadServerConfig({"--config", (dir / "bad.yaml").string()});
  REQUIRE_FALSE(bad_key.ok());
  CHECK_THAT(std::string(bad_key.status().message()), Catch::Contains("no-such-setting"));

  auto bad_value = LoadServerConfig({"--max-running", "0"});
  REQUIRE_FALSE(bad_value.ok());
  CHECK_THAT(std::string(bad_value.status().message()), Catch::Contains("--max-running"));

  auto bad_policy = LoadServerConfig({"--default-policy", "magic"});
  REQUIRE_FALSE(bad_policy.ok());
  CHECK_THAT(std::string(bad_policy.status().message()), Catch::Contains("--default-policy"));
  // Options as the CLI's --policy writes them; a bad one is named.
  CHECK(LoadServerConfig({"--default-policy", "zipvl:tau=0.9,low_bits=evict"}).ok());
  auto bad_option = LoadServerConfig({"--default-policy", "zipvl:tau=2"});
  REQUIRE_FALSE(bad_option.ok());
  CHECK_THAT(std::string(bad_option.status().message()),
             Catch::Contains("--default-policy: policy 'zipvl': tau='2' is not a number in"));

  auto bad_format = LoadServerConfig({"--weight-format", "q4_0"});
  REQUIRE_FALSE(bad_format.ok());
  CHECK_THAT(std::string(bad_format.status().message()), Catch::Contains("--weight-format"));
  auto int8_gpu = LoadServerConfig({"--weight-format", "int8", "--device", "cuda:0"});
  REQUIRE_FALSE(int8_gpu.ok());
  CHECK_THAT(std::string(int8_gpu.status().message()), Catch::Contains("CPU only"));
  auto bad_vision = LoadServerConfig({"--vision-weight-format", "fp8"});
  REQUIRE_FALSE(bad_vision.ok());
  CHECK_THAT(std::string(bad_vision.status().message()), Catch::Contains("--vision-weight-format"));
  auto vision_gpu = LoadServerConfig({"--vision-weight-format", "int8", "--device", "cuda:0"});
  REQUIRE_FALSE(vision_gpu.ok());
  CHECK_THAT(std::string(vision_gpu.status().message()), Catch::Contains("CPU only"));
  auto vision_int8 = LoadServerConfig({"--vision-weight-format", "int8"});
  REQUIRE(vision_int8.ok());
  CHECK(vision_int8->config.vision_weight_format == "int8");
  auto int8 = LoadServerConfig({"--weight-format", "int8"});
  REQUIRE(int8.ok());
  CHECK(int8->config.weight_format == "int8");
  auto fp8_cpu = LoadServerConfig({"--weight-format", "fp8"});
  REQUIRE_FALSE(fp8_cpu.ok());
  CHECK_THAT(std::string(fp8_cpu.status().message()), Catch::Contains("int8"));
  auto fp8_gpu = LoadServerConfig({"--weight-format", "fp8", "--device", "cuda:0"});
  REQUIRE(fp8_gpu.ok());
  CHECK(fp8_gpu->config.weight_format == "fp8");

  // One way to size the KV pool at a time; a fraction of a device's memory needs a device.
  auto budget = LoadServerConfig({"--memory-budget-bytes", "1073741824"});
  REQUIRE(budget.ok());
  CHECK(budget->config.memory_budget_bytes == 1073741824);
  auto both = LoadServerConfig({"--memory-budget-bytes", "1000", "--kv-budget-bytes", "1000"});
  REQUIRE_FALSE(both.ok());
  CHECK_THAT(std::string(both.status().message()), Catch::Contains("give one of them"));
  auto utilization = LoadServerConfig({"--gpu-memory-utilization", "0.9", "--device", "cuda:0"});
  REQUIRE(utilization.ok());
  CHECK(utilization->config.gpu_memory_utilization == 0.9);
  auto utilization_cpu = LoadServerConfig({"--gpu-memory-utilization", "0.9"});
  REQUIRE_FALSE(utilization_cpu.ok());
  CHECK_THAT(std::string(utilization_cpu.status().message()),
             Catch::Contains("--gpu-memory-utilization") && Catch::Contains("not a GPU"));
  for (const char* out_of_range : {"1.5", "-0.1", "nan"}) {
    INFO(out_of_range);
    auto bad = LoadServerConfig({"--gpu-memory-utilization", out_of_range, "--device", "cuda"});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(std::string(bad.status().message()), Catch::Contains("(0, 1]"));
  }
  CHECK_FALSE(LoadServerConfig({"--memory-budget-bytes", "-1"}).ok());

  auto tls = LoadServerConfig({"--tls-cert-file", "cert.pem"});
  REQUIRE_FALSE(tls.ok());
  CHECK_THAT(std::string(tls.status().message()), Catch::Contains("--tls-key-file"));

  auto missing = LoadServerConfig({"--config", (dir / "missing.yaml").string()});
  CHECK_FALSE(missing.ok());

  // The server links no decoder: in-process decoding is refused with the reason.
  auto in_process = LoadServerConfig({"--media-isolation", "none"});
  REQUIRE_FALSE(in_process.ok());
  CHECK_THAT(std::string(in_process.status().message()),
             Catch::Contains("--media-isolation") && Catch::Contains("framezip-media-worker"));
  CHECK(LoadServerConfig({"--media-isolation", "process"}).ok());
}

TEST_CASE("--help documents every setting", "[unit][server]") {
  auto load = LoadServerConfig({"--help"});
  REQUIRE(load.ok());
  CHECK(load->help);
  for (const char* flag : {"--listen", "--metrics-listen", "--model", "--max-upload-bytes",
                           "--auth-token-file", "--tls-cert-file", "--grace-seconds",
                           "--step-token-budget", "--session-ttl-seconds"}) {
    CHECK_THAT(load->help_text, Catch::Contains(flag));
  }
}

}  // namespace
}  // namespace framezip::server
