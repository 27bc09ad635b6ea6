#include "server/shared_sessions.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "common/logging.h"
#include "kvstore/block_key.h"

namespace framezip::server {
namespace {

using nlohmann::json;

constexpr int kRecordVersion = 1;
// Revisions looked up per store round trip.
constexpr uint64_t kWindow = 64;
// What stands in for a revision the store lost (Publish); never read (only the latest is).
const std::string kRevisionPlaceholder = "framezip-session-record-placeholder";

std::string Hex(const std::array<uint8_t, 32>& key) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : key) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

bool FromHex(const std::string& hex, std::array<uint8_t, 32>* out) {
  if (hex.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

json FramesJson(const FrameSpec& f) {
  return {{"num_frames", f.num_frames},
          {"fps", f.fps},
          {"max_frames", f.max_frames},
          {"start_seconds", f.start_seconds},
          {"end_seconds", f.end_seconds}};
}

FrameSpec FramesFrom(const json& j) {
  FrameSpec f;
  f.num_frames = j.at("num_frames").get<uint32_t>();
  f.fps = j.at("fps").get<float>();
  f.max_frames = j.at("max_frames").get<uint32_t>();
  f.start_seconds = j.at("start_seconds").get<double>();
  f.end_seconds = j.at("end_seconds").get<double>();
  return f;
}

// The policy's canonical text (engine/compress/policy_config.h): its name and the options that
// differ from their defaults, which ParsePolicyConfig reads back to the same config.
json PolicyJson(const PolicyConfig& p) { return engine::compress::FormatPolicyConfig(p); }

PolicyConfig PolicyFrom(const json& j) {
  // Records written before the typed options hold an object: its kind, with default options.
  const std::string text = j.is_object() ? j.at("kind").get<std::string>() : j.get<std::string>();
  StatusOr<PolicyConfig> p = engine::compress::ParsePolicyConfig(text);
  if (!p.ok()) throw std::runtime_error("bad policy: " + MessageOf(p.status()));
  return *std::move(p);
}

json SamplingJson(const SamplingSpec& s) {
  return {{"temperature", s.temperature},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"repetition_penalty", s.repetition_penalty},
          {"max_tokens", s.max_tokens},
          {"stop", s.stop},
          {"stop_token_ids", s.stop_token_ids},
          {"seed", s.seed},
          {"ignore_eos", s.ignore_eos}};
}

SamplingSpec SamplingFrom(const json& j) {
  SamplingSpec s;
  s.temperature = j.at("temperature").get<float>();
  s.top_k = j.at("top_k").get<uint32_t>();
  s.top_p = j.at("top_p").get<float>();
  s.repetition_penalty = j.at("repetition_penalty").get<float>();
  s.max_tokens = j.at("max_tokens").get<uint32_t>();
  s.stop = j.at("stop").get<std::vector<std::string>>();
  s.stop_token_ids = j.at("stop_token_ids").get<std::vector<uint32_t>>();
  s.seed = j.at("seed").get<uint64_t>();
  s.ignore_eos = j.at("ignore_eos").get<bool>();
  return s;
}

json MessageJson(const ChatMessage& m) {
  json parts = json::array();
  for (const ContentPart& p : m.content) parts.push_back({p.text, p.media_id});
  return {{"role", RoleName(m.role)}, {"content", parts}};
}

ChatMessage MessageFrom(const json& j) {
  ChatMessage m;
  const std::string role = j.at("role").get<std::string>();
  if (role == "system") {
    m.role = Role::kSystem;
  } else if (role == "assistant") {
    m.role = Role::kAssistant;
  } else if (role == "user") {
    m.role = Role::kUser;
  } else {
    throw std::runtime_error("unknown role");
  }
  for (const json& p : j.at("content")) {
    m.content.push_back({p.at(0).get<std::string>(), p.at(1).get<std::string>()});
  }
  return m;
}

json MediaJson(const MediaInfo& m) {
  return {{"media_id", m.media_id},
          {"name", m.name},
          {"kind", m.kind == MediaKind::kImage ? "image" : "video"},
          {"mime_type", m.mime_type},
          {"size_bytes", m.size_bytes},
          {"content_hash", m.content_hash},
          {"duration_seconds", m.duration_seconds},
          {"fps", m.fps},
          {"width", m.width},
          {"height", m.height},
          {"codec", m.codec},
          {"container", m.container},
          {"frame_timestamps", m.frame_timestamps},
          {"visual_tokens", m.visual_tokens},
          {"frames", FramesJson(m.frames)}};
}

MediaInfo MediaFrom(const json& j) {
  MediaInfo m;
  m.media_id = j.at("media_id").get<std::string>();
  m.name = j.at("name").get<std::string>();
  m.kind = j.at("kind").get<std::string>() == "image" ? MediaKind::kImage : MediaKind::kVideo;
  m.mime_type = j.at("mime_type").get<std::string>();
  m.size_bytes = j.at("size_bytes").get<uint64_t>();
  m.content_hash = j.at("content_hash").get<std::string>();
  m.duration_seconds = j.at("duration_seconds").get<double>();
  m.fps = j.at("fps").get<double>();
  m.width = j.at("width").get<uint32_t>();
  m.height = j.at("height").get<uint32_t>();
  m.codec = j.at("codec").get<std::string>();
  m.container = j.at("container").get<std::string>();
  m.frame_timestamps = j.at("frame_timestamps").get<std::vector<double>>();
  m.visual_tokens = j.at("visual_tokens").get<uint32_t>();
  m.frames = FramesFrom(j.at("frames"));
  return m;
}

}  // namespace

std::string EncodeSharedSession(const SessionRecord& r, const SharedKvState& kv) {
  json media = json::array();
  for (const MediaInfo& m : r.media) media.push_back(MediaJson(m));
  json messages = json::array();
  for (const ChatMessage& m : r.messages) messages.push_back(MessageJson(m));
  json segments = json::array();
  for (const auto& segment : kv.segments) {
    json blocks = json::array();
    for (const SharedKvState::Block& b : segment) blocks.push_back({Hex(b.key), b.bytes});
    segments.push_back(blocks);
  }
  const SessionSpec& s = r.spec;
  json doc = {{"version", kRecordVersion},
              {"revision", r.revision},
              {"owner", r.owner},
              {"key", r.key},
              {"spec",
               {{"session_id", s.session_id},
                {"model", s.model},
                {"policy", PolicyJson(s.policy)},
                {"sampling", SamplingJson(s.sampling)},
                {"frames", FramesJson(s.frames)},
                {"ttl_seconds", s.ttl_seconds},
                {"system_prompt", s.system_prompt},
                {"labels", s.labels}}},
              {"created_unix_ms", r.created_unix_ms},
              {"last_used_unix_ms", r.last_used_unix_ms},
              {"expires_unix_ms", r.expires_unix_ms},
              {"turns", r.turns},
              {"media", media},
              {"messages", messages},
              {"kv",
               {{"stored_messages", kv.stored_messages},
                {"precision", static_cast<int>(kv.precision)},
                {"segments", segments}}}};
  return doc.dump();
}

StatusOr<SharedSession> DecodeSharedSession(const std::string& bytes) {
  try {
    const json doc = json::parse(bytes);
    if (doc.at("version").get<int>() != kRecordVersion) {
      return DataLossError("shared session record: version {} is not {}",
                           doc.at("version").get<int>(), kRecordVersion);
    }
    SharedSession out;
    SessionRecord& r = out.record;
    r.revision = doc.at("revision").get<uint64_t>();
    r.owner = doc.at("owner").get<std::string>();
    r.key = doc.at("key").get<std::string>();
    const json& s = doc.at("spec");
    r.spec.session_id = s.at("session_id").get<std::string>();
    r.spec.model = s.at("model").get<std::string>();
    r.spec.policy = PolicyFrom(s.at("policy"));
    r.spec.sampling = SamplingFrom(s.at("sampling"));
    r.spec.frames = FramesFrom(s.at("frames"));
    r.spec.ttl_seconds = s.at("ttl_seconds").get<uint32_t>();
    r.spec.system_prompt = s.at("system_prompt").get<std::string>();
    r.spec.labels = s.at("labels").get<std::map<std::string, std::string>>();
    r.created_unix_ms = doc.at("created_unix_ms").get<int64_t>();
    r.last_used_unix_ms = doc.at("last_used_unix_ms").get<int64_t>();
    r.expires_unix_ms = doc.at("expires_unix_ms").get<int64_t>();
    r.turns = doc.at("turns").get<uint32_t>();
    for (const json& m : doc.at("media")) r.media.push_back(MediaFrom(m));
    for (const json& m : doc.at("messages")) r.messages.push_back(MessageFrom(m));
    const json& kv = doc.at("kv");
    out.kv.stored_messages = kv.at("stored_messages").get<uint64_t>();
    out.kv.precision = static_cast<KvPrecision>(kv.at("precision").get<int>());
    for (const json& segment : kv.at("segments")) {
      std::vector<SharedKvState::Block> blocks;
      for (const json& b : segment) {
        SharedKvState::Block block;
        if (!FromHex(b.at(0).get<std::string>(), &block.key)) {
          return DataLossError("shared session record: a block key is not 64 hex digits");
        }
        block.bytes = b.at(1).get<uint64_t>();
        blocks.push_back(block);
      }
      out.kv.segments.push_back(std::move(blocks));
    }
    if (SessionIdOfKey(r.key) != r.spec.session_id) {
      return DataLossError("shared session record: its key does not name its session");
    }
    return out;
  } catch (const std::exception& e) {
    return DataLossError("shared session record does not parse: {}", e.what());
  }
}

SharedSessions::SharedSessions(kvstore::KvStore* store, std::string model_id)
    : store_(store), model_id_(std::move(model_id)) {}

kvstore::BlockKey SharedSessions::RevisionKey(const std::string& owner,
                                              const std::string& session_id,
                                              uint64_t revision) const {
  // Neither a principal nor a session id holds '\0': the fields cannot run into each other.
  std::string name = "framezip-session-record";
  name.push_back('\0');
  name += owner;
  name.push_back('\0');
  name += session_id;
  name.push_back('\0');
  name += std::to_string(revision);
  kvstore::BlockKeyInput input;
  input.model_id = model_id_;
  input.compression_config = name;
  return kvstore::ChainBlockKey(kvstore::kRootBlockKey, input);
}

kvstore::BlockKey SharedSessions::TombstoneKey(const std::string& key) const {
  std::string name = "framezip-session-tombstone";
  name.push_back('\0');
  name += key;
  kvstore::BlockKeyInput input;
  input.model_id = model_id_;
  input.compression_config = name;
  return kvstore::ChainBlockKey(kvstore::kRootBlockKey, input);
}

StatusOr<uint64_t> SharedSessions::PresentFrom(const std::string& owner,
                                               const std::string& session_id, uint64_t from) {
  uint64_t present = 0;
  for (;;) {
    std::vector<kvstore::BlockKey> keys;
    for (uint64_t r = from + present; r < from + present + kWindow; ++r) {
      keys.push_back(RevisionKey(owner, session_id, r));
    }
    FZ_ASSIGN_OR_RETURN(const kvstore::LookupResult found, store_->Lookup(keys));
    present += found.present_prefix;
    if (found.present_prefix < kWindow) return present;
  }
}

Status SharedSessions::Publish(const SessionRecord& record, const SharedKvState& kv) {
  kvstore::PutOptions put;
  put.precision = kvstore::Precision::kUnspecified;
  FZ_ASSIGN_OR_RETURN(
      const kvstore::PutResult result,
      store_->Put(RevisionKey(record.owner, record.spec.session_id, record.revision),
                  EncodeSharedSession(record, kv), put));
  if (result.already_present && record.revision > 0) {
    return AlreadyExistsError(
        "revision {} of session '{}' was written by another replica first (turns of one session "
        "ran on two replicas at once)",
        record.revision, record.spec.session_id);
  }
  if (record.revision == 0) return absl::OkStatus();
  // Revisions are found by a contiguous run from 0: when the store lost the earlier ones
  // (restarted empty, flushed), fill them in. Only the latest is ever read, so a placeholder
  // that says nothing will do. One look-up of the previous revision in the usual case.
  const kvstore::BlockKey previous =
      RevisionKey(record.owner, record.spec.session_id, record.revision - 1);
  FZ_ASSIGN_OR_RETURN(const kvstore::LookupResult found,
                      store_->Lookup(std::span<const kvstore::BlockKey>(&previous, 1)));
  if (found.present_prefix == 1) return absl::OkStatus();
  uint64_t filled = 0;
  for (uint64_t r = 0; r < record.revision; ++r) {
    const kvstore::BlockKey key = RevisionKey(record.owner, record.spec.session_id, r);
    FZ_ASSIGN_OR_RETURN(const kvstore::LookupResult one,
                        store_->Lookup(std::span<const kvstore::BlockKey>(&key, 1)));
    if (one.present_prefix == 1) continue;
    FZ_RETURN_IF_ERROR(store_->Put(key, kRevisionPlaceholder, put).status());
    ++filled;
  }
  FZ_LOG_WARN("session '{}': the shared store had lost {} of its revisions before {}; filled in",
              record.spec.session_id, filled, record.revision);
  return absl::OkStatus();
}

StatusOr<SharedSessions::Lookup> SharedSessions::Find(const std::string& owner,
                                                      const std::string& session_id, int64_t known,
                                                      const std::string& key) {
  Lookup out;
  const uint64_t from = known < 0 ? 0 : static_cast<uint64_t>(known);
  FZ_ASSIGN_OR_RETURN(const uint64_t present, PresentFrom(owner, session_id, from));
  if (present == 0) {
    // Not even the revision this replica knows (or any): deleted, or lost with the store.
    out.found = Found::kDeleted;
    if (known >= 0 && !key.empty()) {
      const kvstore::BlockKey tombstone = TombstoneKey(key);
      FZ_ASSIGN_OR_RETURN(const kvstore::LookupResult found,
                          store_->Lookup(std::span<const kvstore::BlockKey>(&tombstone, 1)));
      if (found.present_prefix == 0) out.found = Found::kLost;
    }
    return out;
  }
  const uint64_t latest = from + present - 1;
  if (known >= 0 && latest == static_cast<uint64_t>(known)) return out;  // nothing newer
  FZ_ASSIGN_OR_RETURN(kvstore::Block block, store_->Get(RevisionKey(owner, session_id, latest)));
  if (block.bytes == nullptr)
    return DataLossError("shared session record of '{}' is empty", session_id);
  FZ_ASSIGN_OR_RETURN(SharedSession session, DecodeSharedSession(*block.bytes));
  if (session.record.owner != owner || session.record.spec.session_id != session_id ||
      session.record.revision != latest) {
    return DataLossError("shared session record of '{}' names another session", session_id);
  }
  out.found = Found::kNewer;
  out.session = std::move(session);
  return out;
}

Status SharedSessions::Remove(const std::string& owner, const std::string& session_id,
                              const std::string& key) {
  // The tombstone first: a replica that then misses the revisions knows they were deleted, not
  // lost with the store.
  kvstore::PutOptions put;
  put.precision = kvstore::Precision::kUnspecified;
  FZ_RETURN_IF_ERROR(store_->Put(TombstoneKey(key), "deleted", put).status());
  FZ_ASSIGN_OR_RETURN(const uint64_t present, PresentFrom(owner, session_id, 0));
  std::vector<kvstore::BlockKey> keys;
  for (uint64_t r = 0; r < present; ++r) keys.push_back(RevisionKey(owner, session_id, r));
  if (keys.empty()) return absl::OkStatus();
  return store_->Delete(keys).status();
}

}  // namespace framezip::server
