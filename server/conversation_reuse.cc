#include "server/conversation_reuse.h"

#include <algorithm>
#include <map>

#include "common/logging.h"
#include "media/content_hash.h"

namespace framezip::server {
namespace {

constexpr char kPrefix[] = "conv-";
constexpr char kOriginLabel[] = "origin";
constexpr char kOrigin[] = "openai";

const MediaInfo* MediaById(const std::vector<MediaInfo>& media, const std::string& id) {
  for (const MediaInfo& m : media) {
    if (m.media_id == id) return &m;
  }
  return nullptr;
}

// A message as comparable text: roles, text, and media by content hash.
std::string Canonical(const ChatMessage& message, const std::vector<MediaInfo>& media) {
  std::string out = RoleName(message.role);
  for (const ContentPart& part : message.content) {
    if (part.media_id.empty()) {
      out += fmt::format("|t{}:{}", part.text.size(), part.text);
    } else {
      const MediaInfo* m = MediaById(media, part.media_id);
      out += fmt::format("|m{}", m != nullptr ? m->content_hash : "?");
    }
  }
  return out;
}

bool TextOnly(const ChatMessage& message) {
  for (const ContentPart& part : message.content) {
    if (!part.media_id.empty()) return false;
  }
  return true;
}

std::string JoinText(const ChatMessage& message) {
  std::string text;
  for (const ContentPart& part : message.content) text += part.text;
  return text;
}

// [system] user (assistant user)*, system and assistant messages text-only.
bool Resumable(const std::vector<ChatMessage>& messages) {
  size_t i = 0;
  if (!messages.empty() && messages[0].role == Role::kSystem) {
    if (!TextOnly(messages[0])) return false;
    i = 1;
  }
  if (i >= messages.size()) return false;
  for (size_t k = 0; i < messages.size(); ++i, ++k) {
    const Role expected = k % 2 == 0 ? Role::kUser : Role::kAssistant;
    if (messages[i].role != expected) return false;
    if (expected == Role::kAssistant && !TextOnly(messages[i])) return false;
  }
  return messages.back().role == Role::kUser;
}

std::string SessionIdOf(const TurnRequest& t) {
  std::string root =
      fmt::format("model:{}|policy:{}", t.model, engine::compress::FormatPolicyConfig(t.policy));
  const bool has_system = t.messages[0].role == Role::kSystem;
  root += "|system:" + (has_system ? Canonical(t.messages[0], t.media) : std::string("-"));
  const ChatMessage& first_user = t.messages[has_system ? 1 : 0];
  root += "|user:" + Canonical(first_user, t.media);
  for (const MediaInfo& m : t.media) {
    root +=
        fmt::format("|frames:{}:{}:{}:{}:{}:{}", m.content_hash, m.frames.num_frames, m.frames.fps,
                    m.frames.max_frames, m.frames.start_seconds, m.frames.end_seconds);
  }
  const media::ContentHash hash =
      media::HashBytes(std::span(reinterpret_cast<const uint8_t*>(root.data()), root.size()));
  return kPrefix + media::ToHex(hash).substr(0, 40);
}

// Removes a conversation's session and everything it holds (here and in the shared store).
void Drop(ServiceCore& core, const SessionRecord& record) {
  StatusOr<SessionRecord> removed = core.sessions->Remove(record.spec.session_id, record.owner);
  if (!removed.ok()) return;
  if (core.shared != nullptr) {
    (void)core.shared->Remove(record.owner, record.spec.session_id, removed->key);
  }
  core.ReleaseSessionResources(removed->key);
}

// Keeps the conversations under options.max_conversations, so they never crowd gRPC's sessions
// out of --max-sessions: the least recently used idle one goes. False: all are running.
bool MakeRoom(ServiceCore& core) {
  std::vector<SessionRecord> idle;
  size_t count = 0;
  for (SessionRecord& r : core.sessions->All()) {
    auto origin = r.spec.labels.find(kOriginLabel);
    if (origin == r.spec.labels.end() || origin->second != kOrigin) continue;
    ++count;
    if (r.running_turn_id.empty()) idle.push_back(std::move(r));
  }
  std::sort(idle.begin(), idle.end(), [](const SessionRecord& a, const SessionRecord& b) {
    return a.last_used_unix_ms < b.last_used_unix_ms;
  });
  for (const SessionRecord& r : idle) {
    if (count < core.options.max_conversations) break;
    Drop(core, r);
    --count;
  }
  return count < core.options.max_conversations;
}

}  // namespace

std::optional<ConversationTurn> ResumeConversation(ServiceCore& core, const TurnRequest& stateless,
                                                   std::vector<std::filesystem::path>* temp_files) {
  if (!Resumable(stateless.messages)) return std::nullopt;
  const std::string& principal = stateless.principal;
  const std::string session_id = SessionIdOf(stateless);
  if (Status s = core.SyncSession(principal, session_id); !s.ok()) return std::nullopt;

  const bool has_system = stateless.messages[0].role == Role::kSystem;
  const size_t history_begin = has_system ? 1 : 0;
  // The history the session must hold: everything before the new user message.
  std::vector<ChatMessage> history(stateless.messages.begin() + history_begin,
                                   stateless.messages.end() - 1);

  StatusOr<SessionRecord> record = core.sessions->Get(session_id, principal);
  bool continues = false;
  if (record.ok()) {
    if (!record->running_turn_id.empty()) return std::nullopt;  // a concurrent branch
    if (record->messages.size() == history.size() + (has_system ? 1 : 0)) {
      continues = true;
      for (size_t i = 0; i < history.size() && continues; ++i) {
        continues = Canonical(record->messages[i + (has_system ? 1 : 0)], record->media) ==
                    Canonical(history[i], stateless.media);
      }
    }
    if (!continues) {
      // Edited history or another branch: this request's conversation replaces the session.
      Drop(core, *record);
      record = NotFoundError("replaced");
    }
  }
  if (!record.ok()) {
    if (!MakeRoom(core)) return std::nullopt;
    SessionSpec spec;
    spec.session_id = session_id;
    spec.model = stateless.model;
    spec.policy = stateless.policy;
    spec.sampling = stateless.sampling;
    if (has_system) spec.system_prompt = JoinText(stateless.messages[0]);
    spec.labels[kOriginLabel] = kOrigin;
    spec.ttl_seconds = core.options.conversation_ttl_seconds;
    record = core.sessions->Create(std::move(spec), principal);
    if (!record.ok()) return std::nullopt;  // max_sessions: run it stateless
  }

  // Media: each content hash once per session, under a session media id.
  std::map<std::string, std::string> id_of;  // request media id -> session media id
  SessionRecord updated = *record;
  for (const MediaInfo& m : stateless.media) {
    auto held = std::find_if(updated.media.begin(), updated.media.end(), [&](const MediaInfo& h) {
      return h.content_hash == m.content_hash && h.frames.num_frames == m.frames.num_frames &&
             h.frames.fps == m.frames.fps;
    });
    if (held != updated.media.end()) {
      id_of[m.media_id] = held->media_id;
      continue;
    }
    MediaInfo moved = m;
    moved.media_id = "media-" + m.content_hash.substr(0, 24);
    const std::filesystem::path target = core.MediaPath(updated.key, moved.media_id);
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    std::filesystem::rename(m.path, target, ec);
    if (ec) {
      std::filesystem::copy_file(m.path, target, ec);
      if (ec) return std::nullopt;
    }
    std::erase(*temp_files, std::filesystem::path(m.path));
    std::filesystem::remove(std::filesystem::path(m.path).parent_path(), ec);  // once empty
    moved.path = target.string();
    id_of[m.media_id] = moved.media_id;
    updated.media.push_back(std::move(moved));
  }
  auto remap = [&](ChatMessage message) {
    for (ContentPart& part : message.content) {
      if (!part.media_id.empty()) part.media_id = id_of.at(part.media_id);
    }
    return message;
  };
  if (!continues) {
    // A new (or replaced) conversation: the session holds the request's history as if its turns
    // had run here; the engine has no KV for it yet and prefills it all this once.
    updated.messages.clear();
    if (has_system) updated.messages.push_back(stateless.messages[0]);
    for (const ChatMessage& m : history) updated.messages.push_back(remap(m));
    updated.turns = static_cast<uint32_t>(history.size() / 2);
  }
  if (updated.media.size() != record->media.size() || !continues) {
    if (updated.media.size() > 16) return std::nullopt;
    if (!core.sessions->Adopt(updated).ok()) return std::nullopt;
  }
  // A new conversation's first revision goes to the shared store as CreateSession's does: other
  // replicas find a session by its revisions from 0 on.
  if (!continues) core.PublishSession(updated.key);

  ConversationTurn out;
  out.session_id = session_id;
  out.session_key = updated.key;
  out.user = remap(stateless.messages.back());
  StatusOr<TurnRequest> turn = core.sessions->BeginTurn(session_id, principal, stateless.turn_id,
                                                        out.user, stateless.sampling);
  if (!turn.ok()) {
    FZ_LOG_DEBUG("conversation {}: not resumed: {}", session_id, MessageOf(turn.status()));
    return std::nullopt;
  }
  out.user = turn->messages.back();
  turn->arrival = stateless.arrival;
  turn->deadline = stateless.deadline;
  turn->cancel_flag = stateless.cancel_flag;
  out.turn = *std::move(turn);
  return out;
}

void EndConversationTurn(ServiceCore& core, const ConversationTurn& turn,
                         const std::optional<std::string>& answer) {
  const bool exists =
      core.sessions->EndTurn(turn.session_key, turn.turn.turn_id, turn.user, answer);
  if (!exists) {
    core.ReleaseSessionResources(turn.session_key);
    return;
  }
  if (answer.has_value() && core.shared != nullptr) core.PublishSession(turn.session_key);
}

}  // namespace framezip::server
