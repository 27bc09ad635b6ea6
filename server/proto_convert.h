// Plain server structs -> framezip.v1 messages (the way back out of the gRPC edge; the way in is
// server/request_validation.h). Stateless and thread-safe.
#pragma once

#include <vector>

#include "framezip/v1/video_chat.pb.h"
#include "server/session_store.h"
#include "server/turn_types.h"

namespace framezip::server {

v1::PolicyKind ToProto(PolicyKind kind);
void ToProto(const PolicyConfig& spec, v1::CompressionPolicy* out);
void ToProto(const SamplingSpec& spec, v1::SamplingParams* out);
void ToProto(const FrameSpec& spec, v1::FrameSampling* out);
void ToProto(const ChatMessage& message, v1::Message* out);
void ToProto(const MediaInfo& media, v1::Media* out);
void ToProto(const KvBytes& kv, v1::KvBytes* out);
void ToProto(const TurnStats& stats, v1::TurnStats* out);
void ToProto(const ModelDescription& model, const PolicyConfig& default_policy,
             uint64_t max_upload_bytes, v1::ModelInfo* out);
// A session with the engine's view of its KV.
void ToProto(const SessionRecord& record, const std::vector<KvBytes>& kv, uint32_t cached_tokens,
             v1::Session* out);

}  // namespace framezip::server
