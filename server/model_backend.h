// The step-level model interface that BatchScheduler drives: prepare a turn (render and tokenize
// the conversation, decode and encode its media, restore the session's cached prefix), then run
// engine steps that mix prefill chunks and decode tokens of many sequences in one batch.
//
// The real implementation is EngineBackend (server/engine_backend.h) over engine/runtime; the
// server's tests use a deterministic double (tests/integration/server_fake_model_backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/turn_engine.h"
#include "server/turn_types.h"

namespace framezip::server {

// One turn's sequence in the engine: its token ids and the KV pages it holds. Destroying it frees
// every page it allocated that was not committed to its session, so dropping a cancelled turn's
// sequence is how its memory is returned.
class BackendSequence {
 public:
  virtual ~BackendSequence() = default;
  // KV bytes this turn has allocated so far (pages restored from the session's cache excluded).
  virtual uint64_t allocated_bytes() const = 0;
  // Overwrites the scheduler's figures in `stats` with what the engine measured (exact token
  // counts, vision time); called once when the turn ends. Default: nothing to add.
  virtual void ReportStats(TurnStats& /*stats*/) const {}
};

// The result of ModelBackend::Prepare.
struct PreparedTurn {
  std::unique_ptr<BackendSequence> sequence;
  uint32_t prompt_tokens = 0;
  // Leading prompt tokens whose KV was restored from the session or the store; the scheduler
  // prefills only prompt_tokens - cached_tokens.
  uint32_t cached_tokens = 0;
  uint32_t visual_tokens_before_pruning = 0;
  uint32_t visual_tokens_after_pruning = 0;
  // Upper bound of the KV bytes the turn will allocate (the new prompt tokens plus
  // max_new_tokens, page-granular, at the costliest format its policy stores), for admission
  // control: an admitted turn is promised this much and never runs out of KV memory.
  uint64_t predicted_kv_bytes = 0;
  // max_tokens resolved against the context: the prompt plus the answer fit the model's context.
  uint32_t max_new_tokens = 0;
  double media_decode_seconds = 0;
  double vision_encode_seconds = 0;
  double kv_restore_seconds = 0;
  KvTier kv_restore_tier = KvTier::kDevice;  // the store tier the prefix was restored from
  uint64_t seed = 0;
};

// One sequence's share of an engine step, and what it produced.
// Why a backend ended a turn at a token: its own stop rule decides (for EngineBackend, the
// engine's: eos and stop token ids, stop strings, max_tokens and the context); the scheduler
// applies the decision and never evaluates a stop rule itself.
enum class StopCause : uint8_t {
  kNone = 0,    // the turn goes on
  kStopToken,   // an end-of-turn or stop token id: its id and text are not shown
  kStopString,  // a stop string: `text` ends before it, and nothing after it is shown
  kLength,      // max_tokens or the context: this token and its text count
};

struct StepItem {
  BackendSequence* sequence = nullptr;
  // > 0: prefill this many more prompt tokens. When they are the last ones, the step also samples
  // the first generated token. 0: decode one token.
  uint32_t prefill_tokens = 0;
  // Outputs.
  bool emitted = false;  // a token was generated
  uint32_t token_id = 0;
  // The text to show for it (UTF-8; whole characters), after the backend's stop rule: empty while
  // a character is partial or while the text may be the start of a stop string (held back and
  // shown with a later token), and never any part of a stop string.
  std::string text;
  StopCause stop = StopCause::kNone;
  // Bytes of generated text the backend holds back or cut after this token (the held-back
  // prefix of a possible stop string; at kStopString, the stop string and what followed it).
  uint32_t withheld_bytes = 0;
  Status status;  // a per-sequence failure (e.g. a corrupt restored page)
};

// KV memory a backend takes outside a running turn's reservation: Prepare restoring a session's
// KV from the store. The backend reserves first (the scheduler checks the budget against what is
// used and what running turns were promised), allocates, then releases the reservation, since
// the pages then count as used. So a restore never takes pages an admitted turn was promised.
// Thread-safe.
class KvReservations {
 public:
  virtual ~KvReservations() = default;
  // True when `bytes` fit beside the KV in use and every promise; they are promised until
  // Release.
  virtual bool TryReserve(uint64_t bytes) = 0;
  virtual void Release(uint64_t bytes) = 0;
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual const ModelDescription& model() const = 0;

  // Thread-safe; runs on a worker pool, never the step thread. INVALID_ARGUMENT when the prompt
  // does not fit the context or a media item cannot be decoded. KV allocated outside the turn's
  // own steps (a restore from the store) is reserved through `kv` first.
  virtual StatusOr<PreparedTurn> Prepare(const TurnRequest& request, KvReservations& kv) = 0;

  // Runs one engine step over `batch` (step thread only). A non-OK return fails every item;
  // per-item failures go in StepItem::status.
  virtual Status Step(std::span<StepItem> batch) = 0;

  // Keeps the finished sequence's KV as the session's cache for its next turn, replacing what
  // the session kept before (step thread only). Sessions are named by their key
  // (TurnRequest::session_key) here and below.
  virtual Status Commit(const std::string& session_key, BackendSequence& sequence) = 0;

  // Thread-safe session KV accounting; see TurnEngine.
  virtual std::vector<KvBytes> ReleaseSession(const std::string& session_id) = 0;
  virtual std::vector<KvBytes> SessionKv(const std::string& session_id) const = 0;
  virtual uint32_t SessionCachedTokens(const std::string& session_id) const = 0;
  // Sessions' KV commits are queued or being written (once in the store, those sessions can be
  // evicted: a turn that does not fit waits for them). Thread-safe. Default: none.
  virtual bool KvCommitsPending() const { return false; }
  // TurnEngine::SessionDurability. Thread-safe. Default: no store.
  virtual KvDurability SessionDurability(const std::string& /*session_key*/) const {
    return KvDurability::kNoStore;
  }

  // Engine KV memory: what is allocated now (sessions' caches and running sequences) and the
  // budget. Thread-safe.
  virtual uint64_t KvUsedBytes() const = 0;
  virtual uint64_t KvCapacityBytes() const = 0;

  // Writes every session's KV to the KV store (drain). Thread-safe.
  virtual Status FlushSessions() = 0;

  // The session KV store's state (TurnEngine::StoreHealth), called periodically off the step
  // thread (housekeeping): it may also check that the store still holds the sessions' KV.
  // Default: no store.
  virtual KvStoreHealth StoreHealth() { return {}; }

  // TurnEngine::ForgetSession / kv_store. Thread-safe.
  virtual std::vector<KvBytes> ForgetSession(const std::string& session_key) {
    return ReleaseSession(session_key);
  }
  virtual kvstore::KvStore* kv_store() { return nullptr; }
  // TurnEngine::ExportSharedKv / AdoptSharedKv. Thread-safe. Default: nothing shared.
  virtual SharedKvState ExportSharedKv(const std::string& /*session_key*/) { return {}; }
  virtual Status AdoptSharedKv(const std::string& /*session_key*/, const SharedKvState& /*kv*/) {
    return absl::OkStatus();
  }

  // Frees at least `bytes` of engine KV memory, when it can, by evicting idle sessions whose KV
  // is safe in the KV store (their next turn restores it). Returns the bytes freed. Called by the
  // scheduler when a turn does not fit the KV budget. Default: nothing to evict.
  virtual uint64_t EvictIdleSessions(uint64_t /*bytes*/) { return 0; }
};

}  // namespace framezip::server
