#include "server/openai_protocol.h"

#include <absl/strings/escaping.h>
#include <google/protobuf/util/json_util.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "common/client_text.h"
#include "engine/compress/policy_config.h"
#include "server/policy_proto.h"

namespace framezip::server {
namespace {

using nlohmann::json;

constexpr std::string_view kDataPrefix = "data:";
constexpr std::string_view kStoredPrefix = "framezip://media/";
constexpr std::string_view kFilePrefix = "file://";

// A JSON number that must be a non-negative integer up to `max` (huge values included: they are
// refused here with the field's name, not wrapped or clamped).
StatusOr<uint64_t> UnsignedField(const json& v, const std::string& field, uint64_t max) {
  if (!v.is_number_integer() &&
      !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))) {
    return InvalidArgumentError("{}: must be an integer", field);
  }
  const double d = v.get<double>();
  if (d < 0) return InvalidArgumentError("{}: must be >= 0", field);
  if (d > static_cast<double>(max) || (v.is_number_unsigned() && v.get<uint64_t>() > max)) {
    return InvalidArgumentError("{}: {} is over the limit of {}", field, ClientText(v.dump()), max);
  }
  return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(d);
}

StatusOr<double> NumberField(const json& v, const std::string& field) {
  if (!v.is_number()) return InvalidArgumentError("{}: must be a number", field);
  return v.get<double>();
}

StatusOr<std::string> StringField(const json& v, const std::string& field) {
  if (!v.is_string()) return InvalidArgumentError("{}: must be a string", field);
  return v.get<std::string>();
}

// A JSON object parsed into a proto message by protobuf's JSON mapping (field names as in the
// .proto or lowerCamelCase, enums by name).
Status ProtoFromJson(const json& v, const std::string& field, google::protobuf::Message* message) {
  if (!v.is_object()) return InvalidArgumentError("{}: must be an object", field);
  google::protobuf::util::JsonParseOptions options;
  const auto status = google::protobuf::util::JsonStringToMessage(v.dump(), message, options);
  if (!status.ok()) {
    return InvalidArgumentError(
        "{}: {}", field,
        ClientText(std::string(status.message().data(), status.message().size()), 128));
  }
  return absl::OkStatus();
}

// One media URL of a content part: inline bytes or a stored media id.
Status AddMedia(const std::string& url, const std::string& field, bool video,
                OpenAiChatRequest* out, v1::ContentPart* part) {
  if (url.rfind(kStoredPrefix, 0) == 0) {
    const std::string id = url.substr(kStoredPrefix.size());
    if (id.empty() || id.size() > 128 ||
        id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos) {
      return InvalidArgumentError("{}: '{}' does not name a media id (framezip://media/ID)", field,
                                  ClientText(url));
    }
    out->stored_media_ids.push_back(id);
    part->set_media_id(id);
    return absl::OkStatus();
  }
  if (url.rfind(kFilePrefix, 0) == 0) {
    const std::string path = url.substr(kFilePrefix.size());
    if (path.empty() || path.front() != '/' || path.size() > 4096) {
      return InvalidArgumentError("{}: '{}' is not file:///ABSOLUTE/PATH", field, ClientText(url));
    }
    v1::InlineMedia* media = out->generate.add_media();
    media->set_media_id(fmt::format("inline-{}", out->generate.media_size()));
    media->set_name(media->media_id());
    out->local_media.push_back({out->generate.media_size() - 1, path, field});
    part->set_media_id(media->media_id());
    return absl::OkStatus();
  }
  if (url.rfind(kDataPrefix, 0) != 0) {
    const size_t colon = url.find(':');
    const std::string scheme = colon == std::string::npos ? url : url.substr(0, colon);
    return InvalidArgumentError(
        "{}: the scheme '{}' is refused (the server fetches nothing): send the bytes as a "
        "data:<type>;base64, URL or upload them and name them framezip://media/ID",
        field, ClientText(scheme));
  }
  const size_t comma = url.find(',');
  if (comma == std::string::npos) {
    return InvalidArgumentError("{}: a data: URL needs ',' before its bytes", field);
  }
  const std::string header = url.substr(kDataPrefix.size(), comma - kDataPrefix.size());
  constexpr std::string_view kBase64 = ";base64";
  if (header.size() < kBase64.size() ||
      header.compare(header.size() - kBase64.size(), kBase64.size(), kBase64) != 0) {
    return InvalidArgumentError("{}: only base64 data: URLs are accepted (data:<type>;base64,...)",
                                field);
  }
  std::string mime = header.substr(0, header.size() - kBase64.size());
  if (mime.empty()) mime = video ? "video/mp4" : "image/png";
  if (mime.rfind("video/", 0) != 0 && mime.rfind("image/", 0) != 0) {
    return InvalidArgumentError("{}: the data: URL's type '{}' is not video/* or image/*", field,
                                ClientText(mime));
  }
  v1::InlineMedia* media = out->generate.add_media();
  media->set_media_id(fmt::format("inline-{}", out->generate.media_size()));
  media->set_name(media->media_id());
  media->set_mime_type(mime);
  const absl::string_view encoded(url.data() + comma + 1, url.size() - comma - 1);
  if (encoded.empty() || !absl::Base64Unescape(encoded, media->mutable_data())) {
    return InvalidArgumentError("{}: the data: URL's bytes are not valid base64", field);
  }
  part->set_media_id(media->media_id());
  return absl::OkStatus();
}

Status AddContentPart(const json& p, const std::string& field, OpenAiChatRequest* out,
                      v1::Message* message) {
  if (!p.is_object()) return InvalidArgumentError("{}: must be an object", field);
  auto type_it = p.find("type");
  if (type_it == p.end()) return InvalidArgumentError("{}.type: missing", field);
  FZ_ASSIGN_OR_RETURN(const std::string type, StringField(*type_it, field + ".type"));
  if (type == "text") {
    auto it = p.find("text");
    if (it == p.end()) return InvalidArgumentError("{}.text: missing", field);
    FZ_ASSIGN_OR_RETURN(std::string text, StringField(*it, field + ".text"));
    message->add_content()->set_text(std::move(text));
    return absl::OkStatus();
  }
  if (type == "image_url" || type == "video_url") {
    auto it = p.find(type);
    if (it == p.end()) return InvalidArgumentError("{}.{}: missing", field, type);
    const std::string url_field = fmt::format("{}.{}.url", field, type);
    std::string url;
    if (it->is_string()) {
      url = it->get<std::string>();
    } else if (it->is_object() && it->contains("url")) {
      FZ_ASSIGN_OR_RETURN(url, StringField(it->at("url"), url_field));
    } else {
      return InvalidArgumentError("{}: missing", url_field);
    }
    return AddMedia(url, url_field, type == "video_url", out, message->add_content());
  }
  return InvalidArgumentError("{}.type: '{}' is not one of text, image_url, video_url", field,
                              ClientText(type));
}

Status AddMessage(const json& m, const std::string& field, OpenAiChatRequest* out) {
  if (!m.is_object()) return InvalidArgumentError("{}: must be an object", field);
  auto role_it = m.find("role");
  if (role_it == m.end()) return InvalidArgumentError("{}.role: missing", field);
  FZ_ASSIGN_OR_RETURN(const std::string role, StringField(*role_it, field + ".role"));
  v1::Message* message = out->generate.add_messages();
  if (role == "system" || role == "developer") {
    message->set_role(v1::ROLE_SYSTEM);
  } else if (role == "user") {
    message->set_role(v1::ROLE_USER);
  } else if (role == "assistant") {
    message->set_role(v1::ROLE_ASSISTANT);
  } else {
    return InvalidArgumentError("{}.role: '{}' is not one of system, developer, user, assistant",
                                field, ClientText(role));
  }
  auto content = m.find("content");
  if (content == m.end() || content->is_null()) {
    return InvalidArgumentError("{}.content: missing", field);
  }
  if (content->is_string()) {
    message->add_content()->set_text(content->get<std::string>());
    return absl::OkStatus();
  }
  if (!content->is_array()) {
    return InvalidArgumentError("{}.content: must be a string or a list of parts", field);
  }
  for (size_t i = 0; i < content->size(); ++i) {
    FZ_RETURN_IF_ERROR(
        AddContentPart((*content)[i], fmt::format("{}.content[{}]", field, i), out, message));
  }
  return absl::OkStatus();
}

Status ReadSampling(const json& body, OpenAiChatRequest* out) {
  v1::SamplingParams* s = out->generate.mutable_sampling();
  if (auto it = body.find("temperature"); it != body.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(const double t, NumberField(*it, "temperature"));
    if (t < 0 || t > 2) return InvalidArgumentError("temperature: {} is not in [0, 2]", t);
    s->set_temperature(static_cast<float>(t));
  }
  if (auto it = body.find("top_p"); it != body.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(const double p, NumberField(*it, "top_p"));
    if (p <= 0 || p > 1) return InvalidArgumentError("top_p: {} is not in (0, 1]", p);
    s->set_top_p(static_cast<float>(p));
  }
  if (auto it = body.find("top_k"); it != body.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(const uint64_t k, UnsignedField(*it, "top_k", 1u << 30));
    s->set_top_k(static_cast<uint32_t>(k));
  }
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(const uint64_t seed,
                        UnsignedField(*it, "seed", std::numeric_limits<uint64_t>::max()));
    s->set_seed(seed);
  }
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (auto it = body.find(name); it != body.end() && !it->is_null()) {
      FZ_ASSIGN_OR_RETURN(const uint64_t n, UnsignedField(*it, name, 1u << 30));
      if (n == 0) return InvalidArgumentError("{}: must be >= 1", name);
      s->set_max_tokens(static_cast<uint32_t>(n));
    }
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      s->add_stop(it->get<std::string>());
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        FZ_ASSIGN_OR_RETURN(std::string stop, StringField((*it)[i], fmt::format("stop[{}]", i)));
        s->add_stop(std::move(stop));
      }
    } else {
      return InvalidArgumentError("stop: must be a string or a list of strings");
    }
  }
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (auto it = body.find(name); it != body.end() && !it->is_null()) {
      FZ_ASSIGN_OR_RETURN(const double v, NumberField(*it, name));
      if (v != 0) {
        return InvalidArgumentError("{}: not supported (only 0); framezip.repetition_penalty is",
                                    name);
      }
    }
  }
  if (auto it = body.find("n"); it != body.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(const uint64_t n,
                        UnsignedField(*it, "n", std::numeric_limits<uint32_t>::max()));
    if (n != 1) return InvalidArgumentError("n: {} is not supported (only n = 1)", n);
  }
  return absl::OkStatus();
}

Status ReadExtension(const json& ext, OpenAiChatRequest* out) {
  if (!ext.is_object()) return InvalidArgumentError("framezip: must be an object");
  if (auto it = ext.find("policy"); it != ext.end() && !it->is_null()) {
    if (it->is_string()) {
      // The CLI's form, "zipvl" or "zipvl:tau=0.9,low_bits=evict", into the same typed options.
      const StatusOr<engine::compress::PolicyConfig> policy =
          engine::compress::ParsePolicyConfig(it->get<std::string>());
      if (!policy.ok()) {
        return InvalidArgumentError("framezip.policy: {}", ClientText(MessageOf(policy.status())));
      }
      PolicyToProto(*policy, out->generate.mutable_policy());
    } else {
      FZ_RETURN_IF_ERROR(ProtoFromJson(*it, "framezip.policy", out->generate.mutable_policy()));
    }
  }
  if (auto it = ext.find("frames"); it != ext.end() && !it->is_null()) {
    FZ_RETURN_IF_ERROR(ProtoFromJson(*it, "framezip.frames", out->generate.mutable_frames()));
  }
  if (auto it = ext.find("repetition_penalty"); it != ext.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(const double p, NumberField(*it, "framezip.repetition_penalty"));
    out->generate.mutable_sampling()->set_repetition_penalty(static_cast<float>(p));
  }
  if (auto it = ext.find("ignore_eos"); it != ext.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidArgumentError("framezip.ignore_eos: must be a boolean");
    out->generate.mutable_sampling()->set_ignore_eos(it->get<bool>());
  }
  return absl::OkStatus();
}

json UsageJson(const TurnStats& stats) {
  return {{"prompt_tokens", stats.prompt_tokens},
          {"completion_tokens", stats.generated_tokens},
          {"total_tokens", stats.prompt_tokens + stats.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", stats.cached_tokens}}}};
}

std::string Event(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

StatusOr<OpenAiChatRequest> ParseChatCompletionRequest(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("the request body is not valid JSON");
  if (!j.is_object()) return InvalidArgumentError("the request body must be a JSON object");
  OpenAiChatRequest out;
  if (auto it = j.find("model"); it != j.end() && !it->is_null()) {
    FZ_ASSIGN_OR_RETURN(std::string model, StringField(*it, "model"));
    out.generate.set_model(std::move(model));
  }
  auto messages = j.find("messages");
  if (messages == j.end() || !messages->is_array()) {
    return InvalidArgumentError("messages: missing, or not a list");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    FZ_RETURN_IF_ERROR(AddMessage((*messages)[i], fmt::format("messages[{}]", i), &out));
  }
  FZ_RETURN_IF_ERROR(ReadSampling(j, &out));
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidArgumentError("stream: must be a boolean");
    out.stream = it->get<bool>();
  }
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgumentError("stream_options: must be an object");
    if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) {
        return InvalidArgumentError("stream_options.include_usage: must be a boolean");
      }
      out.include_usage = u->get<bool>();
    }
  }
  if (auto it = j.find("framezip"); it != j.end() && !it->is_null()) {
    FZ_RETURN_IF_ERROR(ReadExtension(*it, &out));
  }
  return out;
}

const char* OpenAiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

std::string ChatCompletionJson(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const TurnStats& stats) {
  json j = {
      {"id", id},
      {"object", "chat.completion"},
      {"created", created},
      {"model", model},
      {"choices", json::array({{{"index", 0},
                                {"message", {{"role", "assistant"}, {"content", text}}},
                                {"finish_reason", OpenAiFinishReason(stats.finish_reason)}}})},
      {"usage", UsageJson(stats)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ChatChunkEvent(const std::string& id, int64_t created, const std::string& model,
                           const std::string* text, bool with_role, const FinishReason* finish) {
  json delta = json::object();
  if (with_role) delta["role"] = "assistant";
  if (text != nullptr) delta["content"] = *text;
  json choice = {{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}};
  if (finish != nullptr) choice["finish_reason"] = OpenAiFinishReason(*finish);
  return Event({{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", created},
                {"model", model},
                {"choices", json::array({choice})}});
}

std::string ChatUsageEvent(const std::string& id, int64_t created, const std::string& model,
                           const TurnStats& stats) {
  return Event({{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage", UsageJson(stats)}});
}

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string OpenAiErrorJson(const Status& status) {
  const int http = HttpStatusOf(status);
  const char* type = http == 401   ? "authentication_error"
                     : http == 403 ? "permission_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                     : http >= 500 ? "server_error"
                                   : "invalid_request_error";
  const std::string code = absl::StatusCodeToString(status.code());
  json j = {{"error",
             {{"message", MessageOf(status)}, {"type", type}, {"param", nullptr}, {"code", code}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ModelListJson(const std::string& model, int64_t created) {
  json j = {{"object", "list"},
            {"data", json::array({{{"id", model},
                                   {"object", "model"},
                                   {"created", created},
                                   {"owned_by", "framezip"}}})}};
  return j.dump();
}

}  // namespace framezip::server
