// libFuzzer target over the gRPC edge's request validation (server/request_validation.h): the
// fuzzed bytes are parsed as each framezip.v1 request message a client can send (protobuf's own
// parser first, then every field check of ours), so malformed, oversized and out-of-range fields
// are all reached. A request that validates must respect the limits it was checked against.
// Run:
//   build-fuzz/bin/fuzz_request_validation -max_total_time=600
#include <cstddef>
#include <cstdint>
#include <string>

#include "framezip/v1/video_chat.pb.h"
#include "server/request_validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace framezip;
  using namespace framezip::server;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  ValidationDefaults defaults;
  defaults.served_model = "tiny";
  defaults.max_prompt_bytes = 4096;
  defaults.vocab_size = 1000;
  switch (data[0] % 6) {
    case 0: {
      v1::CreateSessionRequest r;
      if (!r.ParseFromString(bytes)) return 0;
      auto v = ValidateCreateSession(r, defaults);
      if (v.ok() && (v->system_prompt.size() > defaults.max_prompt_bytes ||
                     v->sampling.max_tokens > kMaxMaxTokens)) {
        __builtin_trap();
      }
      break;
    }
    case 1: {
      v1::ChatRequest r;
      if (!r.ParseFromString(bytes)) return 0;
      auto v = ValidateChat(r, defaults);
      if (v.ok()) {
        size_t text = 0;
        for (const ContentPart& p : v->user.content) text += p.text.size();
        if (text > defaults.max_prompt_bytes) __builtin_trap();
        for (uint32_t id : v->sampling_override.stop_token_ids) {
          if (id >= defaults.vocab_size) __builtin_trap();
        }
      }
      break;
    }
    case 2: {
      v1::GenerateRequest r;
      if (!r.ParseFromString(bytes)) return 0;
      (void)ValidateGenerate(r, defaults);
      break;
    }
    case 3: {
      v1::UploadMediaRequest r;
      if (!r.ParseFromString(bytes)) return 0;
      auto v = ValidateUploadMetadata(r, 1 << 20, defaults);
      if (v.ok() && (v->declared_size_bytes == 0 || v->declared_size_bytes > (1 << 20))) {
        __builtin_trap();
      }
      break;
    }
    case 4: {
      v1::DeleteMediaRequest r;
      if (!r.ParseFromString(bytes)) return 0;
      (void)ValidateSessionId(r.session_id(), "session_id");
      (void)ValidateMediaId(r.media_id(), "media_id");
      break;
    }
    default: {
      v1::GetModelInfoRequest r;
      if (!r.ParseFromString(bytes)) return 0;
      const Status s = ValidateModel(r.model(), defaults);
      // Client strings are quoted short, whatever their length.
      if (!s.ok() && s.message().size() > 512) __builtin_trap();
      break;
    }
  }
  return 0;
}
