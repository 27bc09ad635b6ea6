// The gRPC edge: every request of framezip.v1.VideoChat is checked here and turned into the plain
// structs of server/turn_types.h and server/session_store.h. Errors are INVALID_ARGUMENT with a
// message that names the field ("sampling.top_p: 1.5 is not in (0, 1]"), so a client can act on
// it. Nothing past this file sees protobuf.
//
// Stateless and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "framezip/v1/video_chat.pb.h"
#include "media/raw_frames.h"
#include "server/session_store.h"
#include "server/turn_types.h"

namespace framezip::server {

// Server defaults the validation resolves "unspecified" values against.
struct ValidationDefaults {
  PolicyConfig default_policy;  // for POLICY_KIND_UNSPECIFIED (none unless --default-policy)
  std::vector<PolicyKind> served_policies;  // empty = all
  std::string served_model;                 // requests naming another model get NOT_FOUND
  uint32_t default_max_tokens = 256;
  uint32_t max_frames = 64;
  // Text of one request (a turn's message, a system prompt, Generate's whole conversation), in
  // bytes: larger prompts are refused before anything tokenizes them.
  uint32_t max_prompt_bytes = 256 * 1024;
  // The model's vocabulary (token ids must be below it); 0 = unknown.
  uint32_t vocab_size = 0;
  // What raw frames are held to: the server's limits for decoded video.
  media::RawFrameLimits raw_frames;
};

// Upper bounds of integer fields that have no natural limit of their own. max_tokens is further
// capped by the model's context when the turn is admitted.
inline constexpr uint32_t kMaxMaxTokens = 1u << 20;
inline constexpr uint32_t kMaxStopTokenIds = 64;

// [A-Za-z0-9_-]{1,64}; `field` names the field in the message.
Status ValidateSessionId(const std::string& id, const char* field);
// Media ids have the same form.
inline Status ValidateMediaId(const std::string& id, const char* field) {
  return ValidateSessionId(id, field);
}

// The policy's options over its kind's defaults (server/policy_proto.h), each in its range, and
// a kind the server serves.
StatusOr<PolicyConfig> ValidatePolicy(const v1::CompressionPolicy& policy,
                                      const ValidationDefaults& defaults, const char* field);
StatusOr<SamplingSpec> ValidateSampling(const v1::SamplingParams& sampling,
                                        const ValidationDefaults& defaults, const char* field);
StatusOr<FrameSpec> ValidateFrames(const v1::FrameSampling& frames,
                                   const ValidationDefaults& defaults, const char* field);
// NOT_FOUND when `model` is non-empty and not the served model.
Status ValidateModel(const std::string& model, const ValidationDefaults& defaults);

StatusOr<SessionSpec> ValidateCreateSession(const v1::CreateSessionRequest& request,
                                            const ValidationDefaults& defaults);

// A Chat request: the new user message and the turn's sampling (the session's, with the fields
// the request sets — non-zero in proto3 — overriding them).
struct ChatInput {
  std::string session_id;
  ChatMessage user;
  SamplingSpec sampling_override;  // fields that are zero keep the session's values
  bool has_sampling_override = false;
};
StatusOr<ChatInput> ValidateChat(const v1::ChatRequest& request,
                                 const ValidationDefaults& defaults);
// The session's sampling with the request's non-zero fields applied.
SamplingSpec MergeSampling(const SamplingSpec& session, const SamplingSpec& override_fields);

// Generate: the whole conversation and its inline media (bytes stay in the request).
struct GenerateInput {
  std::string model;
  PolicyConfig policy;
  SamplingSpec sampling;
  FrameSpec frames;
  std::vector<ChatMessage> messages;
  struct Inline {
    std::string media_id;
    std::string name;
    std::string mime_type;
    const std::string* data = nullptr;  // points into the request
    // Set for decoded frames (data holds their pixels, of the size checked).
    std::optional<media::RawFrames> raw_frames;
  };
  std::vector<Inline> media;
};
// `stored_media_ids`: media the server already holds that messages may name besides the inline
// ones (the OpenAI API's framezip://media/ID parts).
StatusOr<GenerateInput> ValidateGenerate(const v1::GenerateRequest& request,
                                         const ValidationDefaults& defaults,
                                         const std::vector<std::string>& stored_media_ids = {});

// The first message of UploadMedia.
struct UploadInput {
  std::string session_id;
  std::string name;
  std::string mime_type;
  uint64_t declared_size_bytes = 0;
  FrameSpec frames;
  bool has_frames = false;
  // Set when the chunks carry decoded frames (declared_size_bytes is their pixel bytes).
  std::optional<media::RawFrames> raw_frames;
};
// INVALID_ARGUMENT naming the field for bad metadata, raw frames included (their declared size
// must be stride_bytes * height * frame_count); RESOURCE_EXHAUSTED for a declared size over
// `max_upload_bytes`.
StatusOr<UploadInput> ValidateUploadMetadata(const v1::UploadMediaRequest& first,
                                             uint64_t max_upload_bytes,
                                             const ValidationDefaults& defaults);

// RawFrames checked (INVALID_ARGUMENT naming `{field}.width` etc.; media/raw_frames.h), and its
// pixel payload `payload_bytes` long (INVALID_ARGUMENT naming `payload_field` otherwise).
StatusOr<media::RawFrames> ValidateRawFrames(const v1::RawFrames& raw, uint64_t payload_bytes,
                                             const ValidationDefaults& defaults,
                                             const std::string& field,
                                             const std::string& payload_field);

// Conversation messages (Generate and the conversion back in GetSession). Adds the bytes of the
// message's text to `*text_bytes`.
StatusOr<ChatMessage> ValidateMessage(const v1::Message& message, const std::string& field,
                                      size_t* text_bytes);

}  // namespace framezip::server
