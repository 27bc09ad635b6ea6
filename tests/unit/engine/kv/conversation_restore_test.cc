// Engine::ExportConversation / RestoreConversation on the shipped model: a conversation restored
// from its committed segments continues exactly like the uninterrupted one (same greedy tokens),
// prefilling only the new turn.
#include <catch2/catch.hpp>
#include <random>

#include "engine/runtime/engine.h"
#include "tests/testing/random.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine::runtime {
namespace {

std::vector<kv::DecodedSegment> Decode(const std::vector<ConversationSegment>& segments) {
  std::vector<kv::DecodedSegment> out;
  for (const ConversationSegment& s : segments) {
    auto d = kv::DecodeSegment(s.encoded.blocks);
    REQUIRE(d.ok());
    out.push_back(*std::move(d));
  }
  return out;
}

TEST_CASE("a conversation restored from its segments continues like the uninterrupted one",
          "[unit][engine][runtime]") {
  auto eng = Engine::Load(testing::SourceDir() / "models/framezip-tiny-video");
  INFO((eng.ok() ? "" : MessageOf(eng.status())));
  REQUIRE(eng.ok());
  Engine& e = **eng;
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t s = e.image_size();
  VisualInput video;
  auto pixels = Tensor::Empty({4, 3, s, s}, DType::kF32);
  REQUIRE(pixels.ok());
  const std::vector<float> noise = testing::RandomNormal(static_cast<size_t>(4 * 3 * s * s), rng);
  std::copy(noise.begin(), noise.end(), pixels->data<float>());
  video.pixels = *std::move(pixels);

  TurnOptions opt;
  opt.sampling.max_new_tokens = 12;
  std::vector<Message> turns(3);
  turns[0].text = "What is in the video?";
  turns[0].visuals = {video};
  turns[1].text = "What color is it?";
  turns[2].text = "And then?";

  auto conv = e.NewConversation();
  REQUIRE(conv.ok());
  std::vector<ConversationSegment> segments;
  kv::SegmentMark mark;
  for (int t = 0; t < 2; ++t) {
    REQUIRE(e.RunTurn(**conv, std::span(&turns[t], 1), opt).ok());
    auto seg = e.ExportConversation(**conv, mark, 64 << 10);
    REQUIRE(seg.ok());
    mark = seg->encoded.next_mark;
    segments.push_back(*std::move(seg));
  }
  CHECK(segments[1].tokens.size() < segments[0].tokens.size());  // turn 2 carries its text only

  auto decoded = Decode(segments);
  auto restored = e.RestoreConversation(decoded);
  INFO((restored.ok() ? "" : MessageOf(restored.status())));
  REQUIRE(restored.ok());
  Conversation& again = *restored->conversation;
  CHECK(again.cached_tokens() == (*conv)->cached_tokens());
  CHECK(again.kv_bytes() == (*conv)->kv_bytes());

  auto want = e.RunTurn(**conv, std::span(&turns[2], 1), opt);
  auto got = e.RunTurn(again, std::span(&turns[2], 1), opt);
  REQUIRE(want.ok());
  REQUIRE(got.ok());
  CHECK(got->token_ids == want->token_ids);
  CHECK(got->text == want->text);
  CHECK(got->stats.cached_tokens == want->stats.cached_tokens);
  CHECK(got->stats.prefilled_tokens == want->stats.prefilled_tokens);
  CHECK(got->stats.prefilled_tokens < 20);  // only the new text, not the video

  // Restoring only turn 1 gives turn 1's prefix.
  auto first = e.RestoreConversation(std::span(decoded.data(), 1));
  REQUIRE(first.ok());
  CHECK(first->conversation->cached_tokens() < again.cached_tokens());

  SECTION("a corrupt block restores as an error and allocates nothing") {
    std::vector<std::string> blocks = segments[1].encoded.blocks;
    blocks[0][blocks[0].size() / 2] ^= 0x5a;
    CHECK_FALSE(kv::DecodeSegment(blocks).ok());
    // Segments in the wrong order are refused too, before any page is taken.
    const size_t before = e.kv_pool().bytes_in_use();
    std::vector<kv::DecodedSegment> reversed = {decoded[1], decoded[0]};
    CHECK(absl::IsInvalidArgument(e.RestoreConversation(reversed).status()));
    CHECK(e.kv_pool().bytes_in_use() == before);
  }
}

}  // namespace
}  // namespace framezip::engine::runtime
