#include "server/session_store.h"

#include <sys/random.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/client_text.h"

namespace framezip::server {
namespace {

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 128 bits from the kernel's CSPRNG, in hex: the secret part of a session key.
std::string RandomSecret() {
  uint64_t words[2] = {0, 0};
  size_t got = 0;
  auto* bytes = reinterpret_cast<uint8_t*>(words);
  while (got < sizeof(words)) {
    const ssize_t n = getrandom(bytes + got, sizeof(words) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return fmt::format("{:016x}{:016x}", words[0], words[1]);
}

Status NoSession(const std::string& id) {
  return NotFoundError("no session '{}' (never created, deleted or expired)", ClientText(id));
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

SessionRecord* SessionStore::Find(const std::string& id, const std::string& principal) {
  auto name = names_.find({principal, id});
  return name == names_.end() ? nullptr : &sessions_.at(name->second);
}

const SessionRecord* SessionStore::Find(const std::string& id,
                                        const std::string& principal) const {
  auto name = names_.find({principal, id});
  return name == names_.end() ? nullptr : &sessions_.at(name->second);
}

StatusOr<SessionRecord> SessionStore::Create(SessionSpec spec, const std::string& owner) {
  if (spec.ttl_seconds > limits_.max_ttl_seconds) {
    return InvalidArgumentError("ttl_seconds {} is over the server's maximum of {}",
                                spec.ttl_seconds, limits_.max_ttl_seconds);
  }
  std::lock_guard lock(mu_);
  if (sessions_.size() + releasing_.size() >= limits_.max_sessions) {
    return ResourceExhaustedError(
        "the server holds {} sessions, its limit; delete idle sessions or retry later",
        sessions_.size());
  }
  // Each principal names its sessions in its own namespace: two tenants may both use "s1", and
  // one cannot learn which ids another uses.
  auto taken = [&](const std::string& id) {
    return names_.count({owner, id}) != 0 || releasing_.count({owner, id}) != 0;
  };
  if (spec.session_id.empty()) {
    do {
      spec.session_id = NewId();
    } while (taken(spec.session_id));
  } else if (names_.count({owner, spec.session_id}) != 0) {
    return AlreadyExistsError("session_id '{}' is already in use", spec.session_id);
  } else if (releasing_.count({owner, spec.session_id}) != 0) {
    return AlreadyExistsError(
        "session_id '{}' belongs to a deleted session whose last turn is still ending; retry in a "
        "moment",
        spec.session_id);
  }
  if (spec.ttl_seconds == 0) spec.ttl_seconds = limits_.default_ttl_seconds;
  SessionRecord record;
  record.created_unix_ms = record.last_used_unix_ms = NowMs();
  record.expires_unix_ms = record.last_used_unix_ms + int64_t{spec.ttl_seconds} * 1000;
  if (!spec.system_prompt.empty()) {
    record.messages.push_back({Role::kSystem, {{spec.system_prompt, ""}}});
  }
  record.order = next_order_++;
  record.owner = owner;
  record.key = spec.session_id + "." + RandomSecret();
  record.spec = std::move(spec);
  names_[{owner, record.spec.session_id}] = record.key;
  const std::string key = record.key;
  return sessions_[key] = std::move(record);
}

StatusOr<SessionRecord> SessionStore::Get(const std::string& session_id,
                                          const std::string& principal) const {
  std::lock_guard lock(mu_);
  const SessionRecord* s = Find(session_id, principal);
  if (s == nullptr) return NoSession(session_id);
  return *s;
}

std::vector<SessionRecord> SessionStore::All() const {
  std::lock_guard lock(mu_);
  std::vector<SessionRecord> all;
  all.reserve(sessions_.size());
  for (const auto& [id, record] : sessions_) all.push_back(record);
  std::sort(all.begin(), all.end(),
            [](const SessionRecord& a, const SessionRecord& b) { return a.order < b.order; });
  return all;
}

StatusOr<SessionPage> SessionStore::List(const std::string& principal, int32_t page_size,
                                         const std::string& page_token) const {
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
      return InvalidArgumentError("page_token '{}' was not issued by this server",
                                  ClientText(page_token));
    }
  }
  std::lock_guard lock(mu_);
  std::vector<const SessionRecord*> ordered;
  for (auto it = names_.lower_bound({principal, ""}); it != names_.end() && it->first.first == principal;
       ++it) {
    const SessionRecord& record = sessions_.at(it->second);
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

StatusOr<SessionRecord> SessionStore::Remove(const std::string& session_id,
                                             const std::string& principal) {
  std::lock_guard lock(mu_);
  auto name = names_.find({principal, session_id});
  if (name == names_.end()) return NoSession(session_id);
  auto it = sessions_.find(name->second);
  SessionRecord record = std::move(it->second);
  sessions_.erase(it);
  names_.erase(name);
  // The running turn still holds the session's KV (and may commit more): keep the id until it
  // ends (EndTurn), so no new session can take it while anything of this one remains.
  if (!record.running_turn_id.empty()) releasing_[{principal, session_id}] = record.key;
  return record;
}

StatusOr<std::string> SessionStore::CheckMediaRoom(const std::string& session_id,
                                                   const std::string& principal) const {
  std::lock_guard lock(mu_);
  const SessionRecord* s = Find(session_id, principal);
  if (s == nullptr) return NoSession(session_id);
  if (s->media.size() >= limits_.max_media_per_session) {
    return FailedPreconditionError(
        "session '{}' holds {} media items already, the limit (DeleteMedia frees one)",
        session_id, s->media.size());
  }
  return s->key;
}

Status SessionStore::AddMedia(const std::string& key, MediaInfo media) {
  std::lock_guard lock(mu_);
  const std::string id = key.substr(0, key.find('.'));
  auto it = sessions_.find(key);
  if (it == sessions_.end()) {
    return NotFoundError("session '{}' was deleted or expired during the upload", id);
  }
  if (it->second.media.size() >= limits_.max_media_per_session) {
    return FailedPreconditionError(
        "session '{}' holds {} media items already, the limit (DeleteMedia frees one)", id,
        it->second.media.size());
  }
  it->second.media.push_back(std::move(media));
  ++it->second.revision;
  it->second.last_used_unix_ms = NowMs();
  it->second.expires_unix_ms =
      it->second.last_used_unix_ms + int64_t{it->second.spec.ttl_seconds} * 1000;
  return absl::OkStatus();
}

StatusOr<MediaInfo> SessionStore::RemoveMedia(const std::string& session_id,
                                              const std::string& principal,
                                              const std::string& media_id) {
  std::lock_guard lock(mu_);
  SessionRecord* s = Find(session_id, principal);
  if (s == nullptr) return NoSession(session_id);
  auto it = std::find_if(s->media.begin(), s->media.end(),
                         [&](const MediaInfo& m) { return m.media_id == media_id; });
  if (it == s->media.end()) {
    return NotFoundError("media_id '{}' is not a media item of session '{}'",
                         ClientText(media_id), session_id);
  }
  if (!s->running_turn_id.empty()) {
    return FailedPreconditionError(
        "session '{}' has a turn running; delete media between turns", session_id);
  }
  for (const ChatMessage& m : s->messages) {
    for (const ContentPart& p : m.content) {
      if (p.media_id == media_id) {
        return FailedPreconditionError(
            "media '{}' is part of the conversation of session '{}' (its visual tokens are in "
            "the session's KV); delete the session to remove it",
            ClientText(media_id), session_id);
      }
    }
  }
  MediaInfo removed = std::move(*it);
  s->media.erase(it);
  ++s->revision;
  return removed;
}

StatusOr<TurnRequest> SessionStore::BeginTurn(const std::string& session_id,
                                              const std::string& principal,
                                              const std::string& turn_id, ChatMessage user,
                                              const std::optional<SamplingSpec>& sampling) {
  std::lock_guard lock(mu_);
  SessionRecord* found = Find(session_id, principal);
  if (found == nullptr) return NoSession(session_id);
  SessionRecord& s = *found;
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
                                  ClientText(p.media_id), session_id);
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
  request.session_key = s.key;
  request.principal = s.owner;
  request.model = s.spec.model;
  request.messages = s.messages;
  request.messages.push_back(std::move(user));
  request.media = s.media;
  request.policy = s.spec.policy;
  request.sampling = sampling ? *sampling : s.spec.sampling;
  s.running_turn_id = turn_id;
  return request;
}

bool SessionStore::EndTurn(const std::string& key, const std::string& turn_id,
                           const ChatMessage& user, const std::optional<std::string>& answer) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) {
    for (auto r = releasing_.begin(); r != releasing_.end(); ++r) {
      if (r->second == key) {
        releasing_.erase(r);
        break;
      }
    }
    return false;
  }
  if (it->second.running_turn_id != turn_id) return true;
  SessionRecord& s = it->second;
  s.running_turn_id.clear();
  if (answer) {
    s.messages.push_back(user);
    s.messages.push_back({Role::kAssistant, {{*answer, ""}}});
    ++s.turns;
    ++s.revision;
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
      names_.erase({it->second.owner, it->second.spec.session_id});
      expired.push_back(std::move(it->second));
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

Status SessionStore::Adopt(SessionRecord record) {
  std::lock_guard lock(mu_);
  const Name name{record.owner, record.spec.session_id};
  auto existing = names_.find(name);
  if (existing != names_.end()) {
    SessionRecord& local = sessions_.at(existing->second);
    if (!local.running_turn_id.empty()) {
      return FailedPreconditionError("session '{}' has a turn running on this replica",
                                     record.spec.session_id);
    }
    record.order = local.order;
    sessions_.erase(existing->second);
    names_.erase(existing);
  } else {
    if (sessions_.size() + releasing_.size() >= limits_.max_sessions) {
      return ResourceExhaustedError(
          "the server holds {} sessions, its limit; delete idle sessions or retry later",
          sessions_.size());
    }
    record.order = next_order_++;
  }
  record.running_turn_id.clear();
  names_[name] = record.key;
  const std::string key = record.key;
  sessions_[key] = std::move(record);
  return absl::OkStatus();
}

StatusOr<SessionRecord> SessionStore::GetByKey(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return NoSession(SessionIdOfKey(key));
  return it->second;
}

void SessionStore::MarkPublished(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(key);
  if (it != sessions_.end()) it->second.published = true;
}

void SessionStore::Forget(const std::string& session_id, const std::string& owner) {
  std::lock_guard lock(mu_);
  auto name = names_.find({owner, session_id});
  if (name == names_.end()) return;
  auto it = sessions_.find(name->second);
  if (it != sessions_.end() && !it->second.running_turn_id.empty()) return;
  if (it != sessions_.end()) sessions_.erase(it);
  names_.erase(name);
}

size_t SessionStore::size() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

}  // namespace framezip::server
