// Stateless KV reuse: the OpenAI protocol resends the whole conversation with every request, and
// framezip recognises a request that extends a conversation whose KV it keeps, so only the new
// turn is prefilled.
//
// How: each conversation lives in a session of the caller's principal, named after its root —
// "conv-" + SHA-256 of (model, policy, the system message, the first user message with its
// media's content hashes and frame sampling). A request whose earlier messages equal that
// session's conversation (media compared by content hash) becomes the session's next turn
// (SessionStore::BeginTurn): the engine restores the session's KV for the common prefix, from
// memory or from the KV store, and prefills the rest; the answer joins the session's
// conversation, ready for the next request. Sessions, and so the reuse, are:
//   - per principal: the session belongs to the principal that sent the request, so no other
//     principal can hit it (its name is not even looked up in another principal's namespace);
//   - shared between replicas when sessions are (--share-sessions): the session's revision and its
//     KV blocks go to the KV store after each turn, and another replica adopts them;
//   - bounded by --openai-conversation-ttl-seconds of idleness (0: the session TTL), by
//     --openai-max-conversations (the least recently used idle conversation makes room for a new
//     one, so conversations never crowd gRPC sessions out of --max-sessions) and by the KV
//     store's eviction; they show in ListSessions with the label origin=openai.
// What breaks reuse for a request (it then runs as a fresh conversation and replaces the
// session): edited or reordered history, another model, policy or frame sampling (a different
// root, so another session), an answer the client changed before resending it. A request whose
// shape is not [system] user (assistant user)* with text-only system and assistant messages, or
// whose conversation has a turn running (a concurrent branch), runs stateless, as gRPC's
// Generate, and keeps nothing.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "server/service_core.h"

namespace framezip::server {

struct ConversationTurn {
  TurnRequest turn;  // the session's turn
  std::string session_id;
  std::string session_key;
  ChatMessage user;  // the new user message, as the session records it (EndTurn)
};

// The session turn that continues `stateless` (a turn built by PrepareStatelessTurn for
// `principal`, its media files among `*temp_files`), or nullopt when the request cannot be a
// session turn (see above). Media the session does not hold yet move from `*temp_files` into the
// session's media directory. Calls the shared store when there is one: run it on the store or
// media pool. Never fails: every obstacle means "run it stateless".
std::optional<ConversationTurn> ResumeConversation(ServiceCore& core, const TurnRequest& stateless,
                                                   std::vector<std::filesystem::path>* temp_files);

// The turn's end (call once, with the answer when the turn succeeded): the session records the
// user message and answer and, with shared sessions, publishes the new revision (calls the store:
// not on the engine's step thread).
void EndConversationTurn(ServiceCore& core, const ConversationTurn& turn,
                         const std::optional<std::string>& answer);

}  // namespace framezip::server
