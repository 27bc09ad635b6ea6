// Sessions: the conversation, the media and the options of each chat, kept between turns. The
// session's KV lives in the engine (TurnEngine::SessionKv) and is freed by the caller when a
// session is removed or expires; this store only keeps the bookkeeping.
//
// Thread-safe: every method takes the store's lock briefly and never calls out while holding it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/turn_types.h"

namespace framezip::server {

// A validated CreateSession request.
struct SessionSpec {
  std::string session_id;  // empty = generate one
  std::string model;
  PolicySpec policy;
  SamplingSpec sampling;
  FrameSpec frames;
  uint32_t ttl_seconds = 0;  // 0 = the store's default
  std::string system_prompt;
  std::map<std::string, std::string> labels;
};

// A snapshot of one session.
struct SessionRecord {
  SessionSpec spec;  // session_id and ttl_seconds resolved
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  int64_t expires_unix_ms = 0;
  std::vector<MediaInfo> media;
  std::vector<ChatMessage> messages;  // the conversation so far (system prompt first)
  uint32_t turns = 0;
  std::string running_turn_id;  // non-empty while a turn runs
  uint64_t order = 0;           // creation order, for paging
};

struct SessionLimits {
  uint32_t max_sessions = 1024;
  uint32_t max_media_per_session = 8;
  uint32_t default_ttl_seconds = 1800;
  uint32_t max_ttl_seconds = 86400;
};

struct SessionPage {
  std::vector<SessionRecord> sessions;
  std::string next_page_token;  // empty at the end
};

class SessionStore {
 public:
  using WallClock = std::function<std::chrono::system_clock::time_point()>;
  explicit SessionStore(SessionLimits limits, WallClock now = std::chrono::system_clock::now);

  // ALREADY_EXISTS: the id is in use. RESOURCE_EXHAUSTED: max_sessions reached.
  // INVALID_ARGUMENT: ttl over the maximum.
  StatusOr<SessionRecord> Create(SessionSpec spec);
  // NOT_FOUND for ids never created, deleted or expired.
  StatusOr<SessionRecord> Get(const std::string& session_id) const;
  // Oldest first. INVALID_ARGUMENT: page_size < 0 or a token this store did not issue.
  StatusOr<SessionPage> List(int32_t page_size, const std::string& page_token) const;
  // Removes the session and returns it (its running turn id included, to cancel it).
  StatusOr<SessionRecord> Remove(const std::string& session_id);

  // FAILED_PRECONDITION: the session holds max_media_per_session items already. NOT_FOUND.
  Status AddMedia(const std::string& session_id, MediaInfo media);
  // Checks, before an upload starts, that a session exists and has room for one more media item.
  Status CheckMediaRoom(const std::string& session_id) const;

  // Starts a turn: NOT_FOUND; FAILED_PRECONDITION when a turn runs already; INVALID_ARGUMENT for
  // a media_id that is not in the session. `user` is the new user message; media of the session
  // that no message shows yet are placed before its text when it shows none itself. Returns the
  // turn's request (conversation + new message, media, options; turn_id set).
  StatusOr<TurnRequest> BeginTurn(const std::string& session_id, const std::string& turn_id,
                                  ChatMessage user, const std::optional<SamplingSpec>& sampling);
  // Ends the running turn `turn_id`. With an answer the user message and the answer join the
  // conversation; without one (failed or cancelled turn) the conversation is unchanged.
  // Returns false when the session is gone (deleted or expired during the turn): the caller then
  // frees the KV the turn kept.
  bool EndTurn(const std::string& session_id, const std::string& turn_id, const ChatMessage& user,
               const std::optional<std::string>& answer);

  // Removes and returns the sessions idle past their TTL (never one with a running turn).
  std::vector<SessionRecord> ExpireIdle();

  size_t size() const;

 private:
  int64_t NowMs() const;
  std::string NewId();

  const SessionLimits limits_;
  const WallClock now_;
  mutable std::mutex mu_;
  std::map<std::string, SessionRecord> sessions_;
  uint64_t next_order_ = 1;
  uint64_t token_key_;  // mixes page tokens so a forged one is detected
  uint64_t id_state_;
};

}  // namespace framezip::server
