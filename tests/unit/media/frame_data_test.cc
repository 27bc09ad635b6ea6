// FrameData (media/frame_data.h): frames on the heap or in a memfd, the memfd sealed and mapped
// read-only by the reader, and refused when it is not sealed or not the declared size.
#include "media/frame_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <random>

namespace framezip::media {
namespace {

std::vector<float> RandomValues(size_t n) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void Fill(FrameData& data, const std::vector<float>& values) {
  std::copy(values.begin(), values.end(), data.data());
}

TEST_CASE("frames written into a memfd are read back through a sealed read-only mapping",
          "[unit][media]") {
  const std::vector<float> values = RandomValues(3 * 37 * 41);
  FrameData written;
  REQUIRE(written.Resize(values.size(), FrameData::Storage::kMemfd).ok());
  CHECK(written.size() == values.size());
  CHECK(std::all_of(written.begin(), written.end(), [](float x) { return x == 0.0f; }));
  Fill(written, values);

  StatusOr<int> fd = written.ReleaseSealedMemfd();
  REQUIRE(fd.ok());
  CHECK(written.empty());
  const int seals = fcntl(*fd, F_GET_SEALS);
  CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) ==
        (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL));
  CHECK(ftruncate(*fd, 0) != 0);  // nobody can shrink it under the reader's mapping

  StatusOr<FrameData> read = FrameData::MapSealedMemfd(*fd, values.size());
  close(*fd);
  REQUIRE(read.ok());
  CHECK(std::equal(read->begin(), read->end(), values.begin(), values.end()));

  // Copies share the mapping; writing through one moves it to the heap and leaves the other.
  FrameData copy = *read;
  CHECK(copy == *read);
  CHECK(copy.data() != read->data());
  copy.data()[0] = values[0] + 1.0f;
  CHECK((*read)[0] == values[0]);
  CHECK_FALSE(copy == *read);

  FrameData moved = std::move(copy);
  CHECK(moved[0] == values[0] + 1.0f);
  CHECK(moved.size() == values.size());
}

TEST_CASE("a frame buffer that is not sealed or not the declared size is refused",
          "[unit][media]") {
  const std::vector<float> values = RandomValues(64);
  const int fd = memfd_create("test-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, values.data(), values.size() * sizeof(float)) ==
          static_cast<ssize_t>(values.size() * sizeof(float)));
  StatusOr<FrameData> unsealed = FrameData::MapSealedMemfd(fd, values.size());
  CHECK(unsealed.status().code() == absl::StatusCode::kInternal);
  CHECK_THAT(MessageOf(unsealed.status()), Catch::Contains("not sealed against shrinking"));

  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  CHECK_THAT(MessageOf(FrameData::MapSealedMemfd(fd, values.size()).status()),
             Catch::Contains("not sealed against writes"));
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0);
  CHECK_THAT(MessageOf(FrameData::MapSealedMemfd(fd, values.size() + 1).status()),
             Catch::Contains("not 260 bytes"));
  StatusOr<FrameData> ok = FrameData::MapSealedMemfd(fd, values.size());
  REQUIRE(ok.ok());
  CHECK(std::equal(ok->begin(), ok->end(), values.begin(), values.end()));
  close(fd);
}

TEST_CASE("heap frames resize keeping their values and copy deeply", "[unit][media]") {
  const std::vector<float> values = RandomValues(100);
  FrameData a;
  REQUIRE(a.Resize(values.size()).ok());
  Fill(a, values);
  FrameData b = a;
  CHECK(b == a);
  CHECK(b.data() != a.data());
  REQUIRE(b.Resize(150).ok());
  CHECK(std::equal(b.begin(), b.begin() + 100, values.begin()));
  CHECK(std::all_of(b.begin() + 100, b.end(), [](float x) { return x == 0.0f; }));
  // A memfd's writable frames copy to the heap, so a copy never writes into the worker's buffer.
  FrameData shared;
  REQUIRE(shared.Resize(10, FrameData::Storage::kMemfd).ok());
  FrameData heap_copy = shared;
  heap_copy.data()[0] = 5.0f;
  CHECK(shared[0] == 0.0f);
  CHECK(heap_copy.ReleaseSealedMemfd().status().code() == absl::StatusCode::kInternal);
  a.clear();
  CHECK(a.empty());
  CHECK(a.data() == nullptr);
}

}  // namespace
}  // namespace framezip::media
