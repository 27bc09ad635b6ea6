#include "server/session_store.h"

#include <algorithm>
#include <random>
#include <set>

namespace framezip::server {
namespace {

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

SessionStore::SessionStore(SessionLimits limits, WallClock now)
    : limits_(limits), now_(std::move(now)) {
  std::random_device rd;
  token_key_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  id_state_ = (static_cast<uint64_t>(rd()) << 32) | rd();
}

int64_t SessionStore::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now_().time_since_epoch()).count();
}

std::string SessionStore::NewId() { return fmt::format("s-{:016x}", SplitMix(id_state_)); }

StatusOr<SessionRecord> SessionStore::Create(SessionSpec spec) {
  if (spec.ttl_seconds > limits_.max_ttl_seconds) {
    return InvalidArgumentError("ttl_seconds {} is over the server's maximum of {}",
                                spec.ttl_seconds, limits_.max_ttl_seconds);
  }
  std::lock_guard lock(mu_);
  if (sessions_.size() >= limits_.max_sessions) {
    return ResourceExhaustedError(
        "the server holds {} sessions, its limit; delete idle sessions or retry later",
        sessions_.size());
  }
  if (spec.session_id.empty()) {
    do {
      spec.session_id = NewId();
    } while (sessions_.count(spec.session_id) != 0);
  } else if (sessions_.count(spec.session_id) != 0) {
    return AlreadyExistsError("session_id '{}' is already in use", spec.session_id);
  }
  if (spec.ttl_seconds == 0) spec.ttl_seconds = limits_.default_ttl_seconds;
  SessionRecord record;
  record.created_unix_ms = record.last_used_unix_ms = NowMs();
  record.expires_unix_ms = record.last_used_unix_ms + int64_t{spec.ttl_seconds} * 1000;
  if (!spec.system_prompt.empty()) {
    record.messages.push_back({Role::kSystem, {{spec.system_prompt, ""}}});
  }
  record.order = next_order_++;
  record.spec = std::move(spec);
  const std::string id = record.spec.session_id;
  return sessions_[id] = std::move(record);
}

StatusOr<SessionRecord> SessionStore::Get(const std::string& session_id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return NotFoundError("no session '{}' (never created, deleted or expired)", session_id);
  }
  return it->second;
}

StatusOr<SessionPage> SessionStore::List(int32_t page_size, const std::string& page_token) const {
  if (page_size < 0) return InvalidArgumentError("page_size must be >= 0, not {}", page_size);
  const size_t limit = page_size == 0 ? 100 : std::min<int32_t>(page_size, 1000);
  uint64_t after = 0;
  if (!page_token.empty()) {
    // A token is "<order>.<check>" in hex; the check ties it to this server instance.
    const size_t dot = page_token.find('.');
    uint64_t check = 0;
    bool ok = dot != std::string::npos && dot > 0 && dot + 1 < page_token.size() &&
              page_token.size() <= 40;
    if (ok) {
      try {
        size_t used = 0;
        after = std::stoull(page_token.substr(0, dot), &used, 16);
        ok = used == dot;
        check = std::stoull(page_token.substr(dot + 1), &used, 16);
        ok = ok && used == page_token.size() - dot - 1;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    uint64_t state = after ^ token_key_;
    if (!ok || check != SplitMix(state)) {
      return InvalidArgumentError("page_token '{}' was not issued by this server", page_token);
    }
  }
  std::lock_guard lock(mu_);
  std::vector<const SessionRecord*> ordered;
  for (const auto& [id, record] : sessions_) {
    if (record.order > after) ordered.push_back(&record);
  }
  std::sort(ordered.begin(), ordered.end(),
            [](const SessionRecord* a, const SessionRecord* b) { return a->order < b->order; });
  SessionPage page;
  for (size_t i = 0; i < ordered.size() && i < limit; ++i) page.sessions.push_back(*ordered[i]);
  if (ordered.size() > limit) {
    const uint64_t last = page.sessions.back().order;
    uint64_t state = last ^ token_key_;
    page.next_page_token = fmt::format("{:x}.{:x}", last, SplitMix(state));
  }
  return page;
}

StatusOr<SessionRecord> SessionStore::Remove(const std::string& session_id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return NotFoundError("no session '{}' (never created, deleted or expired)", session_id);
  }
  SessionRecord record = std::move(it->second);
  sessions_.erase(it);
  return record;
}

Status SessionStore::CheckMediaRoom(const std::string& session_id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return NotFoundError("no session '{}' (never created, deleted or expired)", session_id);
  }
  if (it->second.media.size() >= limits_.max_media_per_session) {
    return FailedPreconditionError("session '{}' holds {} media items already, the limit",
                                   session_id, it->second.media.size());
  }
  return absl::OkStatus();
}

Status SessionStore::AddMedia(const std::string& session_id, MediaInfo media) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return NotFoundError("session '{}' was deleted or expired during the upload", session_id);
  }
  if (it->second.media.size() >= limits_.max_media_per_session) {
    return FailedPreconditionError("session '{}' holds {} media items already, the limit",
                                   session_id, it->second.media.size());
  }
  it->second.media.push_back(std::move(media));
  it->second.last_used_unix_ms = NowMs();
  it->second.expires_unix_ms =
      it->second.last_used_unix_ms + int64_t{it->second.spec.ttl_seconds} * 1000;
  return absl::OkStatus();
}

StatusOr<TurnRequest> SessionStore::BeginTurn(const std::string& session_id,
                                              const std::string& turn_id, ChatMessage user,
                                              const std::optional<SamplingSpec>& sampling) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return NotFoundError("no session '{}' (never created, deleted or expired)", session_id);
  }
  SessionRecord& s = it->second;
  if (!s.running_turn_id.empty()) {
    return FailedPreconditionError(
        "session '{}' has a turn running already (one turn at a time); wait for its stats",
        session_id);
  }
  std::set<std::string> shown;
  for (const ChatMessage& m : s.messages) {
    for (const ContentPart& p : m.content) {
      if (!p.media_id.empty()) shown.insert(p.media_id);
    }
  }
  bool user_shows_media = false;
  for (const ContentPart& p : user.content) {
    if (p.media_id.empty()) continue;
    user_shows_media = true;
    const bool known = std::any_of(s.media.begin(), s.media.end(),
                                   [&](const MediaInfo& m) { return m.media_id == p.media_id; });
    if (!known) {
      return InvalidArgumentError("content: media_id '{}' is not a media item of session '{}'",
                                  p.media_id, session_id);
    }
  }
  if (!user_shows_media) {
    std::vector<ContentPart> placed;
    for (const MediaInfo& m : s.media) {
      if (shown.count(m.media_id) == 0) placed.push_back({"", m.media_id});
    }
    user.content.insert(user.content.begin(), placed.begin(), placed.end());
  }
  TurnRequest request;
  request.turn_id = turn_id;
  request.session_id = session_id;
  request.model = s.spec.model;
  request.messages = s.messages;
  request.messages.push_back(std::move(user));
  request.media = s.media;
  request.policy = s.spec.policy;
  request.sampling = sampling ? *sampling : s.spec.sampling;
  s.running_turn_id = turn_id;
  return request;
}

bool SessionStore::EndTurn(const std::string& session_id, const std::string& turn_id,
                           const ChatMessage& user, const std::optional<std::string>& answer) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return false;
  if (it->second.running_turn_id != turn_id) return true;  // a newer session with the same id
  SessionRecord& s = it->second;
  s.running_turn_id.clear();
  if (answer) {
    s.messages.push_back(user);
    s.messages.push_back({Role::kAssistant, {{*answer, ""}}});
    ++s.turns;
  }
  s.last_used_unix_ms = NowMs();
  s.expires_unix_ms = s.last_used_unix_ms + int64_t{s.spec.ttl_seconds} * 1000;
  return true;
}

std::vector<SessionRecord> SessionStore::ExpireIdle() {
  const int64_t now = NowMs();
  std::vector<SessionRecord> expired;
  std::lock_guard lock(mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.running_turn_id.empty() && it->second.expires_unix_ms <= now) {
      expired.push_back(std::move(it->second));
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

size_t SessionStore::size() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

}  // namespace framezip::server
