// `framezip version` names the CPU features, the kernels' ISA and the OpenBLAS core, and the
// executable runs OpenBLAS on kernels that use this CPU's widest units even where OpenBLAS itself
// does not recognise the CPU (it re-executes with OPENBLAS_CORETYPE: engine/ops/blas_core.h),
// while a user's own OPENBLAS_CORETYPE is kept.
#include <catch2/catch.hpp>
#include <regex>
#include <string>

#include "engine/ops/blas_core.h"
#include "tests/testing/cli_run.h"

namespace framezip {
namespace {

std::string BlasCoreOf(const testing::CliRun& run) {
  INFO(run.stderr_text << run.stdout_text);
  REQUIRE(run.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(run.stdout_text, m, std::regex("BLAS: OpenBLAS, (\\S+) kernels")));
  return m[1];
}

TEST_CASE("framezip version prints the ISA and runs OpenBLAS on this CPU's widest units", "[cli]") {
  const testing::CliRun run = testing::RunFramezipCli("version", "env -u OPENBLAS_CORETYPE");
  CHECK(run.stdout_text.find("CPU ISA: ") != std::string::npos);
  const std::string core = BlasCoreOf(run);
  INFO("OpenBLAS core: " << core << "; CPU: "
                         << engine::ops::cpu::IsaFeatures(engine::ops::cpu::DetectedIsa()));
  CHECK(engine::ops::cpu::BetterBlasCore(engine::ops::cpu::DetectedIsa(), core).empty());
}

TEST_CASE("framezip version keeps a user's OPENBLAS_CORETYPE", "[cli]") {
  const testing::CliRun run = testing::RunFramezipCli("version", "OPENBLAS_CORETYPE=Prescott");
  CHECK(BlasCoreOf(run) == "Prescott");
}

TEST_CASE("framezip version warns about an unknown FRAMEZIP_CPU_KERNELS and keeps the widest ISA",
          "[cli]") {
  const testing::CliRun plain = testing::RunFramezipCli("version");
  const testing::CliRun odd = testing::RunFramezipCli("version", "FRAMEZIP_CPU_KERNELS=avx9000");
  INFO(odd.stderr_text << odd.stdout_text);
  REQUIRE(odd.exit_code == 0);
  CHECK(odd.stderr_text.find("FRAMEZIP_CPU_KERNELS=avx9000 is not avx512, avx2 or scalar") !=
        std::string::npos);
  std::smatch want, got;
  REQUIRE(std::regex_search(plain.stdout_text, want, std::regex("kernels: (\\S+)")));
  REQUIRE(std::regex_search(odd.stdout_text, got, std::regex("kernels: (\\S+)")));
  CHECK(got[1] == want[1]);
}

}  // namespace
}  // namespace framezip
