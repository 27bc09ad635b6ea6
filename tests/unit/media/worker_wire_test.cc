// The media worker protocol (media/worker/wire.h): requests and replies round-trip, and the
// server refuses replies a compromised worker could craft (out-of-range shapes and counts,
// truncation, trailing bytes) without undefined behaviour on the way.
#include <catch2/catch.hpp>
#include <climits>

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
  CHECK(refused(testing::ReadFileBytes(framezip::testing::SourceDir() /
                                       "tests/fuzz/corpus/media_worker_reply/"
                                       "regression_frame_shape_overflow")));
}

}  // namespace
}  // namespace framezip::media::worker
