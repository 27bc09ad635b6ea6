// The media worker protocol (media/worker/wire.h): requests and replies round-trip, and the
// server refuses replies a compromised worker could craft (out-of-range shapes and counts,
// truncation, trailing bytes) without undefined behaviour on the way.
#include <catch2/catch.hpp>
#include <climits>
#include <cstring>

#include "media/worker/wire.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media::worker {
namespace {

WorkResponse Reply(int frames, int height, int width) {
  WorkResponse r;
  r.has_frames = true;
  r.result.frames.num_frames = frames;
  r.result.frames.height = height;
  r.result.frames.width = width;
  r.result.timestamps_s.assign(static_cast<size_t>(std::max(frames, 0) % 64), 0.5);
  r.result.targets_s = r.result.timestamps_s;
  return r;
}

TEST_CASE("media worker messages round-trip", "[unit][media]") {
  WorkRequest q;
  q.op = WorkOp::kDecode;
  q.sampling.num_frames = 7;
  q.preprocess.height = 336;
  q.preprocess.anyres_pinpoints = {{336, 672}, {1008, 336}};
  q.limits.max_frames = 9;
  q.has_content_hash = true;
  q.content_hash[3] = 0xab;
  auto back = DecodeRequest(EncodeRequest(q));
  REQUIRE(back.ok());
  CHECK(back->op == WorkOp::kDecode);
  CHECK(back->sampling.num_frames == 7);
  CHECK(back->preprocess.height == 336);
  CHECK(back->preprocess.anyres_pinpoints == q.preprocess.anyres_pinpoints);
  CHECK(back->limits.max_frames == 9);
  CHECK(back->content_hash == q.content_hash);

  WorkResponse r = Reply(3, 24, 24);
  r.result.info.codec = "h264";
  r.message = "fine";
  MediaLimits limits;
  auto parsed = DecodeResponse(EncodeResponse(r), limits);
  REQUIRE(parsed.ok());
  CHECK(parsed->result.info.codec == "h264");
  CHECK(parsed->result.frames.num_frames == 3);
  CHECK(parsed->result.timestamps_s == r.result.timestamps_s);
}

TEST_CASE("crafted media worker replies are refused", "[unit][media]") {
  MediaLimits limits;
  limits.max_frames = 8;
  auto refused = [&](const std::vector<uint8_t>& bytes) {
    const Status s = DecodeResponse(bytes, limits).status();
    INFO(MessageOf(s));
    return s.code() == absl::StatusCode::kInternal;
  };
  CHECK(refused(EncodeResponse(Reply(9, 24, 24))));            // more frames than asked
  CHECK(refused(EncodeResponse(Reply(4, INT_MAX, INT_MAX))));  // a shape whose size overflows
  CHECK(refused(EncodeResponse(Reply(4, -5, 24))));
  WorkResponse no_times = Reply(4, 24, 24);
  no_times.result.timestamps_s.clear();
  CHECK(refused(EncodeResponse(no_times)));
  std::vector<uint8_t> ok = EncodeResponse(Reply(2, 8, 8));
  REQUIRE(DecodeResponse(ok, limits).ok());
  for (size_t cut : {size_t{0}, size_t{3}, size_t{8}, ok.size() / 2, ok.size() - 1}) {
    CHECK(refused({ok.begin(), ok.begin() + static_cast<ptrdiff_t>(cut)}));
  }
  std::vector<uint8_t> trailing = ok;
  trailing.push_back(0);
  CHECK(refused(trailing));
  std::vector<uint8_t> bad_magic = ok;
  bad_magic[0] ^= 1;
  CHECK(refused(bad_magic));
  // The fuzzer's finding: an overflow computing the frame buffer's size from hostile dimensions.
  // Stamped with this build's version, so it reaches the shape check rather than the header's.
  std::vector<uint8_t> overflow = testing::ReadFileBytes(
      framezip::testing::SourceDir() /
      "tests/fuzz/corpus/media_worker_reply/regression_frame_shape_overflow");
  REQUIRE(overflow.size() > 6);
  std::memcpy(overflow.data() + 4, &kWireVersion, sizeof(kWireVersion));
  const Status overflow_status = DecodeResponse(overflow, limits).status();
  CHECK(overflow_status.code() == absl::StatusCode::kInternal);
  CHECK_THAT(MessageOf(overflow_status), !Catch::Contains("version"));
}

TEST_CASE("zygote messages round-trip and malformed ones are refused", "[unit][media]") {
  REQUIRE(DecodeFork(EncodeFork()).ok());
  CHECK_FALSE(DecodeFork(EncodeReady(ReadyMessage{})).ok());

  const std::vector<uint8_t> forked = EncodeForked({.pid = 4242, .error = 0});
  REQUIRE(ZygoteMessageKind(forked).ok());
  CHECK(*ZygoteMessageKind(forked) == MessageKind::kForked);
  StatusOr<ForkedMessage> f = DecodeForked(forked);
  REQUIRE(f.ok());
  CHECK(f->pid == 4242);
  StatusOr<ForkedMessage> failed = DecodeForked(EncodeForked({.pid = -1, .error = 11}));
  REQUIRE(failed.ok());
  CHECK(failed->error == 11);
  // Neither a pid nor the reason there is none.
  CHECK_FALSE(DecodeForked(EncodeForked({.pid = -1, .error = 0})).ok());

  const std::vector<uint8_t> exited = EncodeExited({.pid = 77, .wait_status = 9});
  CHECK(*ZygoteMessageKind(exited) == MessageKind::kExited);
  StatusOr<ExitedMessage> e = DecodeExited(exited);
  REQUIRE(e.ok());
  CHECK(e->pid == 77);
  CHECK(e->wait_status == 9);
  CHECK_FALSE(DecodeExited(EncodeExited({.pid = 0, .wait_status = 0})).ok());
  std::vector<uint8_t> trailing = exited;
  trailing.push_back(1);
  CHECK_FALSE(DecodeExited(trailing).ok());
  CHECK_FALSE(DecodeExited({exited.begin(), exited.end() - 1}).ok());
  CHECK_FALSE(ZygoteMessageKind(EncodeResponse(WorkResponse{})).ok());
}

}  // namespace
}  // namespace framezip::media::worker
