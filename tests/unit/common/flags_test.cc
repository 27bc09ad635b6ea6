#include "common/flags.h"

#include <catch2/catch.hpp>
#include <cstdlib>

namespace framezip {
namespace {

TEST_CASE("flags parse values, bools, positionals and report bad input", "[unit][common]") {
  FlagSet flags("t", "test");
  std::string model = "none";
  int n = 1;
  double x = 0.5;
  bool json = false;
  flags.String("model", &model, "model dir");
  flags.Int("max-tokens", &n, "n");
  flags.Double("tau", &x, "tau");
  flags.Bool("json", &json, "json");

  REQUIRE(flags.Parse({"--model", "m", "--max-tokens=7", "pos", "--json", "--tau", "0.975"}).ok());
  CHECK(model == "m");
  CHECK(n == 7);
  CHECK(x == Approx(0.975));
  CHECK(json);
  CHECK(flags.positional() == std::vector<std::string>{"pos"});
  CHECK(flags.WasSet("model"));

  FlagSet again("t", "test");
  again.Int("max-tokens", &n, "n");
  const Status bad = again.Parse({"--max-tokens", "seven"});
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.message()).find("--max-tokens") != std::string::npos);
  CHECK(again.Parse({"--nope"}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(again.Parse({"--max-tokens"}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(FlagSet::IsHelp(again.Parse({"--help"})));
}

TEST_CASE("flags take defaults from FRAMEZIP_ environment variables", "[unit][common]") {
  FlagSet flags("t", "test");
  int port = 1;
  flags.Int("metrics-port", &port, "port");
  ::setenv("FRAMEZIP_METRICS_PORT", "9100", 1);
  REQUIRE(flags.ApplyEnvironment().ok());
  CHECK(port == 9100);
  REQUIRE(flags.Parse({"--metrics-port", "9200"}).ok());
  CHECK(port == 9200);  // the command line wins
  ::setenv("FRAMEZIP_METRICS_PORT", "x", 1);
  CHECK(flags.ApplyEnvironment().code() == absl::StatusCode::kInvalidArgument);
  ::unsetenv("FRAMEZIP_METRICS_PORT");
}

}  // namespace
}  // namespace framezip
