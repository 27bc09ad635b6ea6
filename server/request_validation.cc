#include "server/request_validation.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/client_text.h"
#include "server/policy_proto.h"

namespace framezip::server {
namespace {

constexpr size_t kMaxTextBytes = 1 << 20;  // one text field, whatever max_prompt_bytes says
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr size_t kMaxLabels = 64;
constexpr size_t kMaxMessages = 1024;

bool Finite(float v) { return std::isfinite(v); }

// Valid UTF-8 (protobuf checks `string` fields of proto3 on parse, but text also comes in
// `bytes`-like paths such as stop strings from other clients; be explicit).
bool IsUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// The text of a whole request against max_prompt_bytes, before it is tokenized.
Status CheckPromptBytes(size_t bytes, const ValidationDefaults& d, const char* what) {
  if (bytes > d.max_prompt_bytes) {
    return InvalidArgumentError(
        "{}: {} bytes of text is over the server's limit of {} (max_prompt_bytes)", what, bytes,
        d.max_prompt_bytes);
  }
  return absl::OkStatus();
}

Status CheckText(const std::string& text, const std::string& field) {
  if (text.size() > kMaxTextBytes) {
    return InvalidArgumentError("{}: {} bytes is over the limit of {}", field, text.size(),
                                kMaxTextBytes);
  }
  if (!IsUtf8(text)) return InvalidArgumentError("{}: not valid UTF-8", field);
  return absl::OkStatus();
}

// A container's MIME type is a hint (video/* or image/*); raw frames have their own type.
Status CheckMimeType(const std::string& mime, bool raw_frames, const std::string& field) {
  if (raw_frames) {
    if (!mime.empty() && mime != media::kRawFramesMimeType) {
      return InvalidArgumentError("{}: '{}' with raw_frames; leave it empty or send '{}'", field,
                                  ClientText(mime), media::kRawFramesMimeType);
    }
    return absl::OkStatus();
  }
  if (!mime.empty() && mime.rfind("video/", 0) != 0 && mime.rfind("image/", 0) != 0) {
    return InvalidArgumentError("{}: '{}' is not a video/* or image/* type", field,
                                ClientText(mime));
  }
  return absl::OkStatus();
}

}  // namespace

Status ValidateSessionId(const std::string& id, const char* field) {
  if (id.empty()) return InvalidArgumentError("{}: empty", field);
  if (id.size() > 64) {
    return InvalidArgumentError("{}: {} characters is over the limit of 64", field, id.size());
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) {
      return InvalidArgumentError("{}: '{}' may use only A-Z, a-z, 0-9, '_' and '-'", field,
                                  ClientText(id));
    }
  }
  return absl::OkStatus();
}

Status ValidateModel(const std::string& model, const ValidationDefaults& defaults) {
  if (!model.empty() && model != defaults.served_model) {
    return NotFoundError("model '{}' is not served here (this server serves '{}')",
                         ClientText(model), defaults.served_model);
  }
  return absl::OkStatus();
}

StatusOr<PolicyConfig> ValidatePolicy(const v1::CompressionPolicy& p, const ValidationDefaults& d,
                                      const char* field) {
  FZ_ASSIGN_OR_RETURN(PolicyConfig policy, PolicyFromProto(p, d.default_policy, field));
  const PolicyKind kind = KindOf(policy);
  if (!d.served_policies.empty() && std::find(d.served_policies.begin(), d.served_policies.end(),
                                              kind) == d.served_policies.end()) {
    return InvalidArgumentError("{}.kind: policy '{}' is not available on this server", field,
                                PolicyName(kind));
  }
  return policy;
}

StatusOr<SamplingSpec> ValidateSampling(const v1::SamplingParams& s, const ValidationDefaults& d,
                                        const char* field) {
  const std::string f = field;
  SamplingSpec spec;
  if (s.max_tokens() > kMaxMaxTokens) {
    return InvalidArgumentError("{}.max_tokens: {} is over the limit of {} (and a turn's prompt "
                                "plus max_tokens must fit the model's context)",
                                f, s.max_tokens(), kMaxMaxTokens);
  }
  const uint32_t vocab = d.vocab_size > 0 ? d.vocab_size : kMaxMaxTokens;
  if (s.top_k() > vocab) {
    return InvalidArgumentError("{}.top_k: {} is over the vocabulary size {}", f, s.top_k(),
                                vocab);
  }
  if (static_cast<uint32_t>(s.stop_token_ids_size()) > kMaxStopTokenIds) {
    return InvalidArgumentError("{}.stop_token_ids: {} ids is over the limit of {}", f,
                                s.stop_token_ids_size(), kMaxStopTokenIds);
  }
  for (int i = 0; i < s.stop_token_ids_size(); ++i) {
    if (s.stop_token_ids(i) >= vocab) {
      return InvalidArgumentError("{}.stop_token_ids[{}]: {} is not a token id (vocabulary size "
                                  "{})",
                                  f, i, s.stop_token_ids(i), vocab);
    }
  }
  if (!Finite(s.temperature()) || s.temperature() < 0) {
    return InvalidArgumentError("{}.temperature: {} must be >= 0", f, s.temperature());
  }
  if (!Finite(s.top_p()) || s.top_p() < 0 || s.top_p() > 1) {
    return InvalidArgumentError("{}.top_p: {} is not in (0, 1] (0 means 1)", f, s.top_p());
  }
  if (!Finite(s.repetition_penalty()) || s.repetition_penalty() < 0) {
    return InvalidArgumentError("{}.repetition_penalty: {} must be > 0 (0 means 1)", f,
                                s.repetition_penalty());
  }
  if (s.stop_size() > static_cast<int>(kMaxStopStrings)) {
    return InvalidArgumentError("{}.stop: {} strings is over the limit of {}", f, s.stop_size(),
                                kMaxStopStrings);
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string& stop = s.stop(i);
    if (stop.empty() || stop.size() > kMaxStopBytes) {
      return InvalidArgumentError("{}.stop[{}]: must be 1 to {} bytes", f, i, kMaxStopBytes);
    }
    FZ_RETURN_IF_ERROR(CheckText(stop, fmt::format("{}.stop[{}]", f, i)));
    spec.stop.push_back(stop);
  }
  spec.temperature = s.temperature();
  spec.top_k = s.top_k();
  spec.top_p = s.top_p() == 0 ? 1.0f : s.top_p();
  spec.repetition_penalty = s.repetition_penalty() == 0 ? 1.0f : s.repetition_penalty();
  spec.max_tokens = s.max_tokens();
  spec.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  spec.seed = s.seed();
  spec.ignore_eos = s.ignore_eos();
  return spec;
}

SamplingSpec MergeSampling(const SamplingSpec& session, const SamplingSpec& o) {
  SamplingSpec merged = session;
  if (o.temperature != 0) merged.temperature = o.temperature;
  if (o.top_k != 0) merged.top_k = o.top_k;
  if (o.top_p != 1) merged.top_p = o.top_p;
  if (o.repetition_penalty != 1) merged.repetition_penalty = o.repetition_penalty;
  if (o.max_tokens != 0) merged.max_tokens = o.max_tokens;
  if (!o.stop.empty()) merged.stop = o.stop;
  if (!o.stop_token_ids.empty()) merged.stop_token_ids = o.stop_token_ids;
  if (o.seed != 0) merged.seed = o.seed;
  if (o.ignore_eos) merged.ignore_eos = true;
  return merged;
}

StatusOr<FrameSpec> ValidateFrames(const v1::FrameSampling& fr, const ValidationDefaults& d,
                                   const char* field) {
  const std::string f = field;
  FrameSpec spec;
  if (fr.mode_case() == v1::FrameSampling::kNumFrames) {
    if (fr.num_frames() == 0 || fr.num_frames() > d.max_frames) {
      return InvalidArgumentError("{}.num_frames: {} is not in [1, {}]", f, fr.num_frames(),
                                  d.max_frames);
    }
    spec.num_frames = fr.num_frames();
  } else if (fr.mode_case() == v1::FrameSampling::kFps) {
    if (!Finite(fr.fps()) || fr.fps() <= 0 || fr.fps() > 60) {
      return InvalidArgumentError("{}.fps: {} is not in (0, 60]", f, fr.fps());
    }
    spec.fps = fr.fps();
  }
  if (fr.max_frames() > d.max_frames) {
    return InvalidArgumentError("{}.max_frames: {} is over the server's limit of {}", f,
                                fr.max_frames(), d.max_frames);
  }
  if (!std::isfinite(fr.start_seconds()) || !std::isfinite(fr.end_seconds()) ||
      fr.start_seconds() < 0 || fr.end_seconds() < 0 ||
      (fr.end_seconds() != 0 && fr.end_seconds() <= fr.start_seconds())) {
    return InvalidArgumentError(
        "{}: the clip window [{}, {}] s is invalid (need 0 <= start < end, or end = 0)", f,
        fr.start_seconds(), fr.end_seconds());
  }
  spec.max_frames = fr.max_frames();
  spec.start_seconds = fr.start_seconds();
  spec.end_seconds = fr.end_seconds();
  return spec;
}

StatusOr<SessionSpec> ValidateCreateSession(const v1::CreateSessionRequest& r,
                                            const ValidationDefaults& d) {
  SessionSpec spec;
  if (!r.session_id().empty()) {
    FZ_RETURN_IF_ERROR(ValidateSessionId(r.session_id(), "session_id"));
  }
  FZ_RETURN_IF_ERROR(ValidateModel(r.model(), d));
  spec.session_id = r.session_id();
  spec.model = d.served_model;
  FZ_ASSIGN_OR_RETURN(spec.policy, ValidatePolicy(r.policy(), d, "policy"));
  FZ_ASSIGN_OR_RETURN(spec.sampling, ValidateSampling(r.sampling(), d, "sampling"));
  FZ_ASSIGN_OR_RETURN(spec.frames, ValidateFrames(r.frames(), d, "frames"));
  FZ_RETURN_IF_ERROR(CheckText(r.system_prompt(), "system_prompt"));
  FZ_RETURN_IF_ERROR(CheckPromptBytes(r.system_prompt().size(), d, "system_prompt"));
  spec.ttl_seconds = r.ttl_seconds();
  spec.system_prompt = r.system_prompt();
  if (r.labels_size() > static_cast<int>(kMaxLabels)) {
    return InvalidArgumentError("labels: {} entries is over the limit of {}", r.labels_size(),
                                kMaxLabels);
  }
  for (const auto& [key, value] : r.labels()) {
    if (key.empty() || key.size() > 63 || value.size() > 256) {
      return InvalidArgumentError("labels['{}']: keys must be 1 to 63 bytes, values up to 256",
                                  ClientText(key));
    }
    spec.labels[key] = value;
  }
  return spec;
}

StatusOr<ChatMessage> ValidateMessage(const v1::Message& m, const std::string& field,
                                      size_t* text_bytes) {
  ChatMessage message;
  switch (m.role()) {
    case v1::ROLE_SYSTEM:
      message.role = Role::kSystem;
      break;
    case v1::ROLE_USER:
      message.role = Role::kUser;
      break;
    case v1::ROLE_ASSISTANT:
      message.role = Role::kAssistant;
      break;
    default:
      return InvalidArgumentError("{}.role: must be SYSTEM, USER or ASSISTANT", field);
  }
  for (int i = 0; i < m.content_size(); ++i) {
    const v1::ContentPart& part = m.content(i);
    const std::string pf = fmt::format("{}.content[{}]", field, i);
    if (part.part_case() == v1::ContentPart::kText) {
      FZ_RETURN_IF_ERROR(CheckText(part.text(), pf + ".text"));
      *text_bytes += part.text().size();
      message.content.push_back({part.text(), ""});
    } else if (part.part_case() == v1::ContentPart::kMediaId) {
      FZ_RETURN_IF_ERROR(ValidateMediaId(part.media_id(), (pf + ".media_id").c_str()));
      message.content.push_back({"", part.media_id()});
    } else {
      return InvalidArgumentError("{}: neither text nor media_id is set", pf);
    }
  }
  if (message.content.empty()) return InvalidArgumentError("{}.content: empty message", field);
  return message;
}

StatusOr<ChatInput> ValidateChat(const v1::ChatRequest& r, const ValidationDefaults& d) {
  ChatInput input;
  if (r.content_size() > static_cast<int>(kMaxMessages)) {
    return InvalidArgumentError("content: {} parts is over the limit of {}", r.content_size(),
                                kMaxMessages);
  }
  size_t text_bytes = r.text().size();
  for (const v1::ContentPart& part : r.content()) text_bytes += part.text().size();
  FZ_RETURN_IF_ERROR(CheckPromptBytes(text_bytes, d, "text"));
  FZ_RETURN_IF_ERROR(ValidateSessionId(r.session_id(), "session_id"));
  input.session_id = r.session_id();
  input.user.role = Role::kUser;
  bool has_text = false;
  for (int i = 0; i < r.content_size(); ++i) {
    const v1::ContentPart& part = r.content(i);
    const std::string pf = fmt::format("content[{}]", i);
    if (part.part_case() == v1::ContentPart::kText) {
      FZ_RETURN_IF_ERROR(CheckText(part.text(), pf + ".text"));
      has_text = has_text || !part.text().empty();
      input.user.content.push_back({part.text(), ""});
    } else if (part.part_case() == v1::ContentPart::kMediaId) {
      FZ_RETURN_IF_ERROR(ValidateMediaId(part.media_id(), (pf + ".media_id").c_str()));
      input.user.content.push_back({"", part.media_id()});
    } else {
      return InvalidArgumentError("{}: neither text nor media_id is set", pf);
    }
  }
  if (!r.text().empty()) {
    FZ_RETURN_IF_ERROR(CheckText(r.text(), "text"));
    input.user.content.push_back({r.text(), ""});
    has_text = true;
  }
  if (!has_text) {
    return InvalidArgumentError("text: the message is empty (set `text` or a text content part)");
  }
  if (r.has_sampling()) {
    FZ_ASSIGN_OR_RETURN(input.sampling_override, ValidateSampling(r.sampling(), d, "sampling"));
    input.has_sampling_override = true;
  }
  return input;
}

StatusOr<GenerateInput> ValidateGenerate(const v1::GenerateRequest& r, const ValidationDefaults& d,
                                         const std::vector<std::string>& stored_media_ids) {
  GenerateInput input;
  FZ_RETURN_IF_ERROR(ValidateModel(r.model(), d));
  input.model = d.served_model;
  FZ_ASSIGN_OR_RETURN(input.policy, ValidatePolicy(r.policy(), d, "policy"));
  FZ_ASSIGN_OR_RETURN(input.sampling, ValidateSampling(r.sampling(), d, "sampling"));
  FZ_ASSIGN_OR_RETURN(input.frames, ValidateFrames(r.frames(), d, "frames"));
  if (r.media_size() > 16) {
    return InvalidArgumentError("media: {} items is over the limit of 16", r.media_size());
  }
  std::set<std::string> ids;
  for (int i = 0; i < r.media_size(); ++i) {
    const v1::InlineMedia& m = r.media(i);
    const std::string f = fmt::format("media[{}]", i);
    FZ_RETURN_IF_ERROR(ValidateSessionId(m.media_id(), (f + ".media_id").c_str()));
    if (!ids.insert(m.media_id()).second) {
      return InvalidArgumentError("{}.media_id: '{}' is used twice", f, ClientText(m.media_id()));
    }
    if (m.data().empty()) return InvalidArgumentError("{}.data: empty", f);
    FZ_RETURN_IF_ERROR(CheckText(m.name(), f + ".name"));
    if (m.name().size() > 255) {
      return InvalidArgumentError("{}.name: {} bytes is over the limit of 255", f, m.name().size());
    }
    FZ_RETURN_IF_ERROR(CheckMimeType(m.mime_type(), m.has_raw_frames(), f + ".mime_type"));
    GenerateInput::Inline item{m.media_id(), m.name(), m.mime_type(), &m.data(), std::nullopt};
    if (m.has_raw_frames()) {
      FZ_ASSIGN_OR_RETURN(item.raw_frames, ValidateRawFrames(m.raw_frames(), m.data().size(), d,
                                                             f + ".raw_frames", f + ".data"));
      item.mime_type = media::kRawFramesMimeType;
    }
    input.media.push_back(std::move(item));
  }
  for (const std::string& id : stored_media_ids) ids.insert(id);
  if (r.messages_size() == 0) return InvalidArgumentError("messages: empty conversation");
  if (r.messages_size() > static_cast<int>(kMaxMessages)) {
    return InvalidArgumentError("messages: {} is over the limit of {}", r.messages_size(),
                                kMaxMessages);
  }
  size_t text_bytes = 0;
  for (int i = 0; i < r.messages_size(); ++i) {
    const std::string f = fmt::format("messages[{}]", i);
    FZ_ASSIGN_OR_RETURN(ChatMessage message, ValidateMessage(r.messages(i), f, &text_bytes));
    FZ_RETURN_IF_ERROR(CheckPromptBytes(text_bytes, d, "messages"));
    for (const ContentPart& part : message.content) {
      if (!part.media_id.empty() && ids.count(part.media_id) == 0) {
        return InvalidArgumentError("{}: media_id '{}' is not among the request's media", f,
                                    ClientText(part.media_id));
      }
    }
    input.messages.push_back(std::move(message));
  }
  if (input.messages.back().role != Role::kUser) {
    return InvalidArgumentError("messages[{}].role: the last message must be the user's",
                                r.messages_size() - 1);
  }
  return input;
}

StatusOr<UploadInput> ValidateUploadMetadata(const v1::UploadMediaRequest& first,
                                             uint64_t max_upload_bytes,
                                             const ValidationDefaults& d) {
  if (first.payload_case() != v1::UploadMediaRequest::kMetadata) {
    return InvalidArgumentError(
        "metadata: the first UploadMedia message must carry metadata, not a chunk");
  }
  const v1::MediaMetadata& m = first.metadata();
  UploadInput input;
  FZ_RETURN_IF_ERROR(ValidateSessionId(m.session_id(), "metadata.session_id"));
  input.session_id = m.session_id();
  if (m.name().size() > 255) {
    return InvalidArgumentError("metadata.name: {} bytes is over the limit of 255",
                                m.name().size());
  }
  FZ_RETURN_IF_ERROR(CheckText(m.name(), "metadata.name"));
  input.name = m.name();
  FZ_RETURN_IF_ERROR(CheckMimeType(m.mime_type(), m.has_raw_frames(), "metadata.mime_type"));
  input.mime_type = m.mime_type();
  if (m.declared_size_bytes() == 0) {
    return InvalidArgumentError("metadata.declared_size_bytes: must be the upload's size (> 0)");
  }
  if (m.has_raw_frames()) {
    // Checked before any chunk is buffered: a wrong size is refused with the metadata.
    FZ_ASSIGN_OR_RETURN(input.raw_frames,
                        ValidateRawFrames(m.raw_frames(), m.declared_size_bytes(), d,
                                          "metadata.raw_frames", "metadata.declared_size_bytes"));
    input.mime_type = media::kRawFramesMimeType;
  }
  if (m.declared_size_bytes() > max_upload_bytes) {
    return ResourceExhaustedError(
        "metadata.declared_size_bytes: {} bytes is over the server's upload limit of {} bytes",
        m.declared_size_bytes(), max_upload_bytes);
  }
  input.declared_size_bytes = m.declared_size_bytes();
  if (m.has_frames()) {
    FZ_ASSIGN_OR_RETURN(input.frames, ValidateFrames(m.frames(), d, "metadata.frames"));
    input.has_frames = true;
  }
  return input;
}

StatusOr<media::RawFrames> ValidateRawFrames(const v1::RawFrames& raw, uint64_t payload_bytes,
                                             const ValidationDefaults& d, const std::string& field,
                                             const std::string& payload_field) {
  media::RawFrames frames;
  frames.width = raw.width();
  frames.height = raw.height();
  frames.stride_bytes = raw.stride_bytes();
  frames.frame_count = raw.frame_count();
  frames.duration_us = raw.duration_us();
  frames.timestamps_us.assign(raw.timestamps_us().begin(), raw.timestamps_us().end());
  FZ_RETURN_IF_ERROR(media::CheckRawFrames(frames, d.raw_frames, field));
  const uint64_t expected = media::RawFramesPixelBytes(frames);
  if (payload_bytes != expected) {
    return InvalidArgumentError(
        "{}: {} bytes, but {} frames of {} rows of {} bytes (stride_bytes * height * "
        "frame_count) are {} bytes",
        payload_field, payload_bytes, frames.frame_count, frames.height, frames.stride_bytes,
        expected);
  }
  return frames;
}

}  // namespace framezip::server
