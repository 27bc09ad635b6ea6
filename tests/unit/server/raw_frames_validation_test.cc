// Raw RGB24 frames at the gRPC edge (server/request_validation.h): UploadMedia's metadata and
// Generate's inline media are checked before any pixel is buffered, each refusal INVALID_ARGUMENT
// naming the field; a declared size over the upload limit is RESOURCE_EXHAUSTED as for
// containers.
#include <catch2/catch.hpp>

#include "server/request_validation.h"

namespace framezip::server {
namespace {

constexpr uint64_t kMaxUpload = 64u << 20;

v1::UploadMediaRequest RawUpload() {
  v1::UploadMediaRequest first;
  v1::MediaMetadata* m = first.mutable_metadata();
  m->set_session_id("s1");
  v1::RawFrames* raw = m->mutable_raw_frames();
  raw->set_width(64);
  raw->set_height(48);
  raw->set_stride_bytes(64 * 3 + 8);
  raw->set_frame_count(3);
  for (int64_t t : {0, 100'000, 200'000}) raw->add_timestamps_us(t);
  m->set_declared_size_bytes(uint64_t{200} * 48 * 3);
  return first;
}

// The status of validating RawUpload() after `mutate`.
Status Check(void (*mutate)(v1::UploadMediaRequest&), const ValidationDefaults& d = {}) {
  v1::UploadMediaRequest first = RawUpload();
  mutate(first);
  return ValidateUploadMetadata(first, kMaxUpload, d).status();
}

TEST_CASE("raw-frame upload metadata: accepted with its size, layout and MIME type",
          "[unit][server]") {
  auto input = ValidateUploadMetadata(RawUpload(), kMaxUpload, {});
  INFO(MessageOf(input.status()));
  REQUIRE(input.ok());
  REQUIRE(input->raw_frames);
  CHECK(input->raw_frames->width == 64);
  CHECK(input->raw_frames->stride_bytes == 200);
  CHECK(input->raw_frames->timestamps_us == std::vector<int64_t>{0, 100'000, 200'000});
  CHECK(input->mime_type == media::kRawFramesMimeType);
  CHECK(input->declared_size_bytes == 200u * 48 * 3);
  // A container upload has none.
  v1::UploadMediaRequest container = RawUpload();
  container.mutable_metadata()->clear_raw_frames();
  auto plain = ValidateUploadMetadata(container, kMaxUpload, {});
  REQUIRE(plain.ok());
  CHECK(!plain->raw_frames);
}

TEST_CASE("raw-frame upload metadata: each wrong field is refused naming it", "[unit][server]") {
  struct Case {
    const char* what;
    void (*mutate)(v1::UploadMediaRequest&);
    const char* field;
  };
  const Case cases[] = {
      {"zero width",
       [](v1::UploadMediaRequest& r) { r.mutable_metadata()->mutable_raw_frames()->set_width(0); },
       "metadata.raw_frames.width:"},
      {"huge width",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_width(4'000'000'000u);
       },
       "metadata.raw_frames.width:"},
      {"zero height",
       [](v1::UploadMediaRequest& r) { r.mutable_metadata()->mutable_raw_frames()->set_height(0); },
       "metadata.raw_frames.height:"},
      {"huge height",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_height(8193);
       },
       "metadata.raw_frames.height:"},
      {"stride below 3 * width",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_stride_bytes(191);
       },
       "metadata.raw_frames.stride_bytes:"},
      {"no frames",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_frame_count(0);
       },
       "metadata.raw_frames.frame_count:"},
      {"over the frame limit",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_frame_count(70'000);
       },
       "metadata.raw_frames.frame_count:"},
      {"fewer timestamps than frames",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->mutable_timestamps_us()->RemoveLast();
       },
       "metadata.raw_frames.timestamps_us:"},
      {"a negative timestamp",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_timestamps_us(0, -5);
       },
       "metadata.raw_frames.timestamps_us[0]:"},
      {"a timestamp that does not increase",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_timestamps_us(2, 100'000);
       },
       "metadata.raw_frames.timestamps_us[2]:"},
      {"a duration before the last frame",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->mutable_raw_frames()->set_duration_us(150'000);
       },
       "metadata.raw_frames.duration_us:"},
      {"a declared size other than stride * height * count",
       [](v1::UploadMediaRequest& r) {
         r.mutable_metadata()->set_declared_size_bytes(192u * 48 * 3);  // packed, not strided
       },
       "metadata.declared_size_bytes:"},
      {"a container MIME type",
       [](v1::UploadMediaRequest& r) { r.mutable_metadata()->set_mime_type("video/mp4"); },
       "metadata.mime_type:"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const Status s = Check(c.mutate);
    CHECK(absl::IsInvalidArgument(s));
    CHECK_THAT(std::string(MessageOf(s)), Catch::StartsWith(c.field));
  }
  // The size message says what the layout needs.
  const Status size =
      Check([](v1::UploadMediaRequest& r) { r.mutable_metadata()->set_declared_size_bytes(1000); });
  CHECK_THAT(std::string(MessageOf(size)), Catch::Contains("28800"));
}

TEST_CASE("raw-frame upload metadata: limits are the server's for decoded video",
          "[unit][server]") {
  ValidationDefaults d;
  d.raw_frames.max_width = 32;
  const Status narrow = Check([](v1::UploadMediaRequest&) {}, d);
  CHECK(absl::IsInvalidArgument(narrow));
  CHECK_THAT(std::string(MessageOf(narrow)), Catch::Contains("metadata.raw_frames.width"));
  d = {};
  d.raw_frames.max_duration_s = 0.25;  // the derived duration is 0.3 s
  const Status long_clip = Check([](v1::UploadMediaRequest&) {}, d);
  CHECK(absl::IsInvalidArgument(long_clip));
  CHECK_THAT(std::string(MessageOf(long_clip)), Catch::Contains("metadata.raw_frames.duration_us"));

  // Frames whose pixels exceed the upload limit: refused from the metadata, before a chunk is
  // buffered, with the same code as a container's declared size.
  v1::UploadMediaRequest huge = RawUpload();
  v1::RawFrames* raw = huge.mutable_metadata()->mutable_raw_frames();
  raw->set_width(8192);
  raw->set_height(8192);
  raw->set_stride_bytes(8192 * 3);
  raw->set_frame_count(1);
  raw->clear_timestamps_us();
  raw->add_timestamps_us(0);
  huge.mutable_metadata()->set_declared_size_bytes(uint64_t{8192} * 8192 * 3);
  const Status over = ValidateUploadMetadata(huge, kMaxUpload, {}).status();
  CHECK(absl::IsResourceExhausted(over));
  CHECK_THAT(std::string(MessageOf(over)), Catch::Contains("metadata.declared_size_bytes"));
}

TEST_CASE("Generate's inline raw frames: checked against the data's length", "[unit][server]") {
  v1::GenerateRequest request;
  v1::InlineMedia* media = request.add_media();
  media->set_media_id("frames");
  v1::RawFrames* raw = media->mutable_raw_frames();
  raw->set_width(2);
  raw->set_height(2);
  raw->set_stride_bytes(6);
  raw->set_frame_count(2);
  raw->add_timestamps_us(0);
  raw->add_timestamps_us(40'000);
  media->set_data(std::string(24, '\x7f'));
  v1::Message* user = request.add_messages();
  user->set_role(v1::ROLE_USER);
  user->add_content()->set_media_id("frames");
  user->add_content()->set_text("What is shown?");
  auto input = ValidateGenerate(request, {});
  INFO(MessageOf(input.status()));
  REQUIRE(input.ok());
  REQUIRE(input->media.size() == 1);
  REQUIRE(input->media[0].raw_frames);
  CHECK(input->media[0].raw_frames->frame_count == 2);
  CHECK(input->media[0].mime_type == media::kRawFramesMimeType);

  media->set_data(std::string(23, '\x7f'));
  Status s = ValidateGenerate(request, {}).status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(MessageOf(s)), Catch::StartsWith("media[0].data:"));
  media->set_data(std::string(24, '\x7f'));
  raw->set_timestamps_us(1, 0);
  s = ValidateGenerate(request, {}).status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(MessageOf(s)), Catch::StartsWith("media[0].raw_frames.timestamps_us[1]:"));
}

}  // namespace
}  // namespace framezip::server
