// SharedSessions: sessions shared by the replicas behind one Service, through the KV store they
// share (a framezip-kvstore, or a Redis tier under each embedded store). Any replica can take a
// session's next turn: it finds the session's latest revision in the store, adopts it (the
// conversation, the media list, the owner and the incarnation key; the KV's block keys), and
// restores the KV from the store instead of re-encoding the video.
//
// Each revision of a session (server/session_store.h: SessionRecord::revision, bumped by a
// turn's answer and by media changes) is written as one immutable block under a key derived from
// (model, owner, session id, revision): revisions 0..R are contiguous, so one Lookup over a window
// of keys tells the latest. Keys carry the owner, so a principal only ever finds its own sessions;
// the block holds the session's 128-bit secret, as the store holds its KV: the store is trusted
// infrastructure, clients never see either.
//
// What replicas must share besides the store: the media directory (--media-dir on a volume every
// replica mounts) for media a turn has not shown yet, or a turn that must re-prefill. A session's
// turns must not run on two replicas at once (clients wait for a turn's end anyway); if they do,
// the later revision written wins and the other replica's turn is not kept.
//
// A store that loses every record (framezip-kvstore restarted empty, its Redis flushed or failed
// over) must not read as "deleted everywhere": a deletion also writes a tombstone under the
// session's incarnation key, so Find tells kDeleted (tombstone present) from kLost (records gone,
// no tombstone), and the replica that holds the session republishes it. Publish fills in the
// revisions before its own that the store lost, with small placeholder blocks, so the revisions
// stay contiguous from 0 and other replicas find the session again. (Should the store also lose
// a tombstone before a replica holding a stale copy looks, that replica republishes the deleted
// session: a deletion is only as durable as the store.)
//
// Thread-safe (the store is). Calls the store: never from a gRPC reaction or the step thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "kvstore/store.h"
#include "server/session_store.h"
#include "server/turn_engine.h"

namespace framezip::server {

// One published revision: the session and its KV state.
struct SharedSession {
  SessionRecord record;  // running_turn_id empty; media paths empty (each replica fills its own)
  SharedKvState kv;
};

class SharedSessions {
 public:
  // `store` must outlive this; `model_id` keys the records (another model's never match).
  SharedSessions(kvstore::KvStore* store, std::string model_id);

  // Writes `session`'s revision, and placeholders for the earlier revisions the store lost.
  // ALREADY_EXISTS when another replica wrote that revision first.
  Status Publish(const SessionRecord& record, const SharedKvState& kv);

  // What the store says of a session this replica knows at revision `known` (-1: not at all).
  // kLost: the store has no revision of it from `known` on and no tombstone of the incarnation
  // `key` (the store lost its records; the caller republishes its copy).
  enum class Found { kNothingNewer, kNewer, kDeleted, kLost };
  struct Lookup {
    Found found = Found::kNothingNewer;
    std::optional<SharedSession> session;  // kNewer
  };
  // kDeleted: the replica knows a revision the store no longer has (deleted elsewhere), or knows
  // none and the store has none. UNAVAILABLE when the store cannot be reached; DATA_LOSS for a
  // record that does not parse.
  // `key`: the incarnation this replica knows (empty when `known` is -1).
  StatusOr<Lookup> Find(const std::string& owner, const std::string& session_id, int64_t known,
                        const std::string& key = "");

  // Writes the tombstone of the incarnation `key`, then deletes every revision of the session.
  Status Remove(const std::string& owner, const std::string& session_id, const std::string& key);

 private:
  kvstore::BlockKey RevisionKey(const std::string& owner, const std::string& session_id,
                                uint64_t revision) const;
  kvstore::BlockKey TombstoneKey(const std::string& key) const;
  // Revisions [from, from + n) present, counted from `from`.
  StatusOr<uint64_t> PresentFrom(const std::string& owner, const std::string& session_id,
                                 uint64_t from);

  kvstore::KvStore* const store_;
  const std::string model_id_;
};

// The record as bytes and back (JSON; versioned). Exposed for tests.
std::string EncodeSharedSession(const SessionRecord& record, const SharedKvState& kv);
StatusOr<SharedSession> DecodeSharedSession(const std::string& bytes);

}  // namespace framezip::server
