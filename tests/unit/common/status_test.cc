#include "common/status.h"

#include <catch2/catch.hpp>

#include "common/logging.h"

namespace framezip {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  FZ_ASSIGN_OR_RETURN(int h, Half(x));
  FZ_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckPositive(int x) {
  FZ_RETURN_IF_ERROR(x > 0 ? absl::OkStatus() : absl::OutOfRangeError("not positive"));
  return absl::OkStatus();
}

TEST_CASE("status macros propagate the first error", "[unit][common]") {
  CHECK(*Quarter(8) == 2);
  CHECK(Quarter(6).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CheckPositive(1).ok());
  CHECK(CheckPositive(0).code() == absl::StatusCode::kOutOfRange);
}

TEST_CASE("logging accepts known levels and formats and refuses others", "[unit][common]") {
  CHECK(InitLogging({"debug", LogFormat::kJson}).ok());
  FZ_LOG_DEBUG("a \"quoted\" message\nwith a newline");
  CHECK(InitLogging({"off", LogFormat::kText}).ok());
  CHECK(InitLogging({"loud", LogFormat::kText}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(*ParseLogFormat("json") == LogFormat::kJson);
  CHECK(ParseLogFormat("xml").status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(InitLogging({"info", LogFormat::kText}).ok());
}

}  // namespace
}  // namespace framezip
