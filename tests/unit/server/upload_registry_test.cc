// UploadRegistry (server/upload_registry.h): idle uploads are expired once, touched ones are not,
// and an unregistered upload is never expired.
#include <catch2/catch.hpp>

#include <thread>

#include "server/upload_registry.h"

namespace framezip::server {
namespace {

using namespace std::chrono_literals;

TEST_CASE("uploads idle past the timeout are expired once, active and finished ones are not",
          "[unit][server]") {
  UploadRegistry registry(100ms);
  int idle_expired = 0, active_expired = 0, done_expired = 0;
  auto idle = registry.Register([&] { ++idle_expired; });
  auto active = registry.Register([&] { ++active_expired; });
  auto done = registry.Register([&] { ++done_expired; });
  registry.Unregister(*done);
  const auto later = UploadRegistry::Clock::now() + 150ms;
  registry.Touch(*active);
  CHECK(registry.ExpireIdle(UploadRegistry::Clock::now()) == 0);
  // Pretend 150 ms passed; `active` was touched just now, so only its touch time counts.
  CHECK(registry.ExpireIdle(later) == 2);  // idle, and active (its touch is 150 ms old by then)
  CHECK(idle_expired == 1);
  CHECK(active_expired == 1);
  CHECK(done_expired == 0);
  CHECK(registry.ExpireIdle(later + 1s) == 0);  // never twice
  CHECK(registry.size() == 0);
}

TEST_CASE("a touched upload outlives the timeout", "[unit][server]") {
  UploadRegistry registry(200ms);
  int expired = 0;
  auto entry = registry.Register([&] { ++expired; });
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(60ms);
    registry.Touch(*entry);
    CHECK(registry.ExpireIdle() == 0);
  }
  CHECK(expired == 0);
  registry.Unregister(*entry);
}

}  // namespace
}  // namespace framezip::server
