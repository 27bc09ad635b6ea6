// Sessions: the conversation, the media and the options of each chat, kept between turns. The
// session's KV lives in the engine (TurnEngine::SessionKv) and is freed by the caller when a
// session is removed or expires; this store only keeps the bookkeeping.
//
// Ownership: a session belongs to the principal that created it (server/auth.h); for every other
// principal it does not exist (NOT_FOUND, the same message as for an unknown id), and listing
// shows a principal its own sessions only.
//
// Names: each principal has its own namespace of session ids (two tenants may both have "s1").
//
// Identity: each session gets a `key`, "<session_id>.<128-bit random secret in hex>", that names
// this incarnation of the id everywhere below the gRPC edge: the engine's KV (TurnRequest::
// session_key), the KV store's block keys (whose chain starts from the key, so no other session
// can ever compute or hit them), the media directory. A session id is never reused while
// anything of the old session may remain: a session removed while a turn runs keeps its id
// reserved (CreateSession gets ALREADY_EXISTS) until EndTurn reports that turn's end, when the
// caller frees what the turn kept.
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
  PolicyConfig policy;
  SamplingSpec sampling;
  FrameSpec frames;
  uint32_t ttl_seconds = 0;  // 0 = the store's default
  std::string system_prompt;
  std::map<std::string, std::string> labels;
};

// A snapshot of one session.
struct SessionRecord {
  SessionSpec spec;   // session_id and ttl_seconds resolved
  std::string owner;  // the principal that created it ("" = anonymous)
  std::string key;    // this incarnation's internal name; never shown to clients
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  int64_t expires_unix_ms = 0;
  std::vector<MediaInfo> media;
  std::vector<ChatMessage> messages;  // the conversation so far (system prompt first)
  uint32_t turns = 0;
  std::string running_turn_id;  // non-empty while a turn runs
  uint64_t order = 0;           // creation order, for paging
  // Bumped by every change another replica must see (media added or removed, a turn's answer);
  // 0 at creation. Replicas sharing sessions publish each revision (server/shared_sessions.h).
  uint64_t revision = 0;
  bool published = false;  // some revision of it is in the shared store
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

  // ALREADY_EXISTS: the id is in use, or still reserved by a removed session whose last turn is
  // ending. RESOURCE_EXHAUSTED: max_sessions reached. INVALID_ARGUMENT: ttl over the maximum.
  StatusOr<SessionRecord> Create(SessionSpec spec, const std::string& owner);
  // NOT_FOUND for ids never created, deleted, expired, or owned by another principal.
  StatusOr<SessionRecord> Get(const std::string& session_id, const std::string& principal) const;
  // `principal`'s sessions, oldest first. INVALID_ARGUMENT: page_size < 0 or a token this store
  // did not issue.
  StatusOr<SessionPage> List(const std::string& principal, int32_t page_size,
                             const std::string& page_token) const;
  // Every session (housekeeping: gauges), oldest first.
  std::vector<SessionRecord> All() const;
  // Removes the session and returns it (its running turn id included, to cancel it). NOT_FOUND
  // as Get.
  StatusOr<SessionRecord> Remove(const std::string& session_id, const std::string& principal);

  // Checks, before an upload starts, that the session exists for `principal` and has room for
  // one more media item; returns the session's key, which the upload then adds to (AddMedia).
  // FAILED_PRECONDITION: the session holds max_media_per_session items already. NOT_FOUND.
  StatusOr<std::string> CheckMediaRoom(const std::string& session_id,
                                       const std::string& principal) const;
  // Adds to the incarnation `key`: NOT_FOUND when it was deleted or expired meanwhile (even if a
  // new session took its id). FAILED_PRECONDITION: no room.
  Status AddMedia(const std::string& key, MediaInfo media);
  // Removes a media item that no message of the conversation shows yet (an upload the session
  // does not want, or one its turns keep failing on) and returns it, for the caller to delete its
  // bytes. NOT_FOUND: no such session or media item. FAILED_PRECONDITION: a message shows it
  // already (its visual tokens are in the session's KV: delete the session instead) or a turn is
  // running.
  StatusOr<MediaInfo> RemoveMedia(const std::string& session_id, const std::string& principal,
                                  const std::string& media_id);

  // Starts a turn: NOT_FOUND; FAILED_PRECONDITION when a turn runs already; INVALID_ARGUMENT for
  // a media_id that is not in the session. `user` is the new user message; media of the session
  // that no message shows yet are placed before its text when it shows none itself. Returns the
  // turn's request (conversation + new message, media, options; turn_id and session_key set).
  StatusOr<TurnRequest> BeginTurn(const std::string& session_id, const std::string& principal,
                                  const std::string& turn_id, ChatMessage user,
                                  const std::optional<SamplingSpec>& sampling);
  // Ends the running turn `turn_id` of the incarnation `key`. With an answer the user message and
  // the answer join the conversation; without one (failed or cancelled turn) the conversation is
  // unchanged. Returns false when that incarnation is gone (deleted during the turn): the caller
  // then frees the KV the turn kept, and from now on the id may be created again.
  bool EndTurn(const std::string& key, const std::string& turn_id, const ChatMessage& user,
               const std::optional<std::string>& answer);

  // Removes and returns the sessions idle past their TTL (never one with a running turn).
  std::vector<SessionRecord> ExpireIdle();

  // Replicas sharing sessions (server/shared_sessions.h). Adopt puts `record` (a revision
  // another replica published) in place of this replica's copy of the session, if any; it
  // keeps the record's key, owner and revision. FAILED_PRECONDITION while a turn runs in the
  // local copy. Forget drops the local copy of a session another replica deleted.
  Status Adopt(SessionRecord record);
  // The session named by its key (any owner); NOT_FOUND when gone.
  StatusOr<SessionRecord> GetByKey(const std::string& key) const;
  // Notes that a revision of the session was published (so a store without it means deleted).
  void MarkPublished(const std::string& key);
  void Forget(const std::string& session_id, const std::string& owner);

  size_t size() const;

 private:
  int64_t NowMs() const;
  std::string NewId();
  // The live session `id` if `principal` owns it, else nullptr.
  SessionRecord* Find(const std::string& id, const std::string& principal);
  const SessionRecord* Find(const std::string& id, const std::string& principal) const;

  const SessionLimits limits_;
  const WallClock now_;
  mutable std::mutex mu_;
  using Name = std::pair<std::string, std::string>;  // (owner, session id)
  std::map<std::string, SessionRecord> sessions_;  // by key
  std::map<Name, std::string> names_;              // -> key
  // Names of removed sessions whose running turn has not ended yet -> their key.
  std::map<Name, std::string> releasing_;
  uint64_t next_order_ = 1;
  uint64_t token_key_;  // mixes page tokens so a forged one is detected
  uint64_t id_state_;
};

}  // namespace framezip::server
