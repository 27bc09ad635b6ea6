#include "server/session_kv.h"

#include <algorithm>
#include <thread>

#include "common/logging.h"
#include "engine/runtime/engine.h"
#include "kvstore/service/remote_store.h"
#include "kvstore/tiered_store.h"

namespace framezip::server {

namespace rt = engine::runtime;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

KvPrecision PrecisionOf(engine::kv::KvFormat format) {
  switch (format) {
    case engine::kv::KvFormat::kF32:
      return KvPrecision::kF32;
    case engine::kv::KvFormat::kF16:
      return KvPrecision::kF16;
    case engine::kv::KvFormat::kInt4:
      return KvPrecision::kInt4;
    case engine::kv::KvFormat::kInt2:
      return KvPrecision::kInt2;
    case engine::kv::KvFormat::kLowRank:
      return KvPrecision::kLowRank;
  }
  return KvPrecision::kF16;
}

// The KV store config `kvstore` names: "embedded" (a TieredStore in this process: host RAM, plus
// disk when kvstore_disk_path is set), "none", or the address of a framezip-kvstore.
StatusOr<std::unique_ptr<SessionKvCache>> OpenKvCache(const ServerConfig& config,
                                                      const std::string& model_id) {
  SessionKvCacheOptions options;
  options.model_id = model_id;
  options.pin_ttl = std::chrono::seconds(std::max(config.max_session_ttl_seconds, 60));
  if (config.kvstore == "none" || config.kvstore.empty()) return nullptr;
  if (config.kvstore == "embedded") {
    kvstore::TieredStoreOptions o;
    o.host = kvstore::HostTierOptions{static_cast<uint64_t>(config.kvstore_host_bytes)};
    if (!config.kvstore_disk_path.empty()) {
      kvstore::DiskTierOptions disk;
      disk.dir = config.kvstore_disk_path;
      o.disk = disk;
      // Host first; a block reaches disk when the host tier evicts it or at drain (Flush).
      o.write_mode = kvstore::WriteMode::kWriteBack;
    }
    if (!config.kvstore_redis.empty()) {
      kvstore::RedisTierOptions redis;
      FZ_RETURN_IF_ERROR(
          Annotate(kvstore::ParseRedisAddress(config.kvstore_redis, &redis), "--kvstore-redis"));
      o.redis = redis;
      // Replicas share the Redis tier: every block reaches it before the turn ends.
      o.write_mode = kvstore::WriteMode::kWriteThrough;
      o.redis_write_through = true;
    }
    o.default_pin_ttl = options.pin_ttl;
    FZ_ASSIGN_OR_RETURN(std::unique_ptr<kvstore::TieredStore> store,
                        kvstore::TieredStore::Open(std::move(o)));
    kvstore::TieredStore* embedded = store.get();
    return std::make_unique<SessionKvCache>(std::move(store), embedded, options);
  }
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<kvstore::service::RemoteStore> remote,
                      kvstore::service::RemoteStore::Connect({.address = config.kvstore}));
  return std::make_unique<SessionKvCache>(std::move(remote), nullptr, options);
}

// Chains checked per Health call (one store round trip each): with the default 1 s
// housekeeping, a thousand idle sessions are all checked within 16 s of a store's loss.
constexpr size_t kChainChecksPerCall = 64;

}  // namespace

StatusOr<std::unique_ptr<SessionKv>> SessionKv::Open(const ServerConfig& config,
                                                     const std::string& model_id,
                                                     rt::Engine* engine) {
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<SessionKvCache> cache, OpenKvCache(config, model_id));
  return std::make_unique<SessionKv>(engine, std::move(cache),
                                     static_cast<size_t>(std::max(config.kv_commit_queue, 1)));
}

SessionKv::SessionKv(rt::Engine* engine, std::unique_ptr<SessionKvCache> cache,
                     size_t commit_queue_capacity)
    : engine_(engine), kv_cache_(std::move(cache)) {
  if (kv_cache_ != nullptr) {
    commit_queue_ = std::make_unique<CommitQueue>(
        commit_queue_capacity, [this](const std::string& key) { RunQueuedCommit(key); });
  }
}

SessionKv::~SessionKv() {
  commit_queue_.reset();  // its worker reads sessions
  std::lock_guard lock(mu_);
  sessions_.clear();  // conversations before the engine
}

KvPrecision SessionKv::Precision() { return KvPrecision::kF16; }

StatusOr<SessionKv::Attached> SessionKv::Attach(const TurnRequest& request, KvReservations& kv,
                                                PreparedTurn& turn) {
  bool evicted = false;
  {
    std::unique_lock lock(mu_);
    // The commit worker may be reading the conversation's pages (never for longer than that).
    export_cv_.wait(lock, [&] {
      auto it = sessions_.find(request.session_key);
      return it == sessions_.end() || !it->second.exporting;
    });
    SessionState& state = sessions_[request.session_key];
    if (state.busy) {
      return FailedPreconditionError("session '{}' already has a turn in progress",
                                     request.session_id);
    }
    state.busy = true;
    state.last_used = Clock::now();
    evicted = state.conversation == nullptr && state.messages_fed > 0;
  }
  RestoredSession restored;
  if (evicted) {
    StatusOr<RestoredSession> r = RestoreEvicted(request, kv, turn);
    if (!r.ok()) {
      EndTurn(request.session_key);  // the turn lets go of the session
      return r.status();
    }
    restored = std::move(*r);
  }
  std::unique_lock lock(mu_);
  SessionState& state = sessions_[request.session_key];
  if (restored.conversation != nullptr) {
    state.conversation = std::move(restored.conversation);
    state.mark = std::move(restored.mark);
    state.messages_fed = state.stored_messages;
    state.kv_bytes = state.conversation->kv_bytes();
    state.cached_tokens = static_cast<uint32_t>(state.conversation->cached_tokens());
    state.store_current = true;
  } else if (state.conversation == nullptr) {
    StatusOr<std::unique_ptr<rt::Conversation>> fresh = engine_->NewConversation(request.policy);
    if (!fresh.ok()) {
      lock.unlock();
      EndTurn(request.session_key);
      return fresh.status();
    }
    state.conversation = std::move(*fresh);
    state.messages_fed = 0;
    state.stored_messages = 0;
    state.mark = {};
    state.pending_media.clear();
    state.committed_media.clear();
    state.chain_lost = false;
    state.store_current = false;
  }
  return Attached{state.conversation.get(),
                  std::min(state.messages_fed, request.messages.size() - 1), state.kv_bytes};
}

StatusOr<SessionKv::RestoredSession> SessionKv::RestoreEvicted(const TurnRequest& request,
                                                               KvReservations& kv,
                                                               PreparedTurn& turn) {
  RestoredSession out;
  if (kv_cache_ != nullptr && kv_cache_->segments(request.session_key) > 0) {
    KvTier tier = KvTier::kHost;
    StatusOr<rt::RestoredConversation> r =
        RestoreFromStore(request, kv, &turn.kv_restore_seconds, &tier);
    // No KV room for the restore within the turn's patience: refuse the turn (nothing of the
    // session is lost; its next turn restores).
    if (absl::IsResourceExhausted(r.status()) || absl::IsCancelled(r.status()) ||
        absl::IsDeadlineExceeded(r.status())) {
      return r.status();
    }
    if (r.ok()) {
      turn.kv_restore_tier = tier;
      out.conversation = std::move(r->conversation);
      out.mark = std::move(r->mark);
      return out;
    }
    FZ_LOG_WARN(
        "session '{}': restoring its KV from the store failed ({}); re-prefilling its "
        "history",
        request.session_id, MessageOf(r.status()));
  }
  // Starting over from the first message: the store's segments no longer continue this KV.
  if (kv_cache_ != nullptr) kv_cache_->Release(request.session_key);
  return out;
}

Status SessionKv::KeepTurn(const std::string& session_key, const rt::Conversation& conversation,
                           size_t messages_total,
                           const std::vector<std::array<uint8_t, 32>>& media_hashes) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  if (it == sessions_.end() || it->second.released ||
      it->second.conversation.get() != &conversation) {
    return FailedPreconditionError("session '{}' was released during its turn",
                                   SessionIdOfKey(session_key));
  }
  SessionState& state = it->second;
  state.messages_fed = messages_total + 1;  // + the reply
  state.kv_bytes = conversation.kv_bytes();
  state.kv_bytes_by_format = conversation.current().stats.kv_bytes_by_format;
  state.cached_tokens = static_cast<uint32_t>(conversation.cached_tokens());
  state.store_current = false;
  ++state.finished_turns;
  state.pending_media.insert(state.pending_media.end(), media_hashes.begin(), media_hashes.end());
  // The store is written off the step thread, once the turn lets go of the session (EndTurn).
  state.commit_wanted = kv_cache_ != nullptr;
  return absl::OkStatus();
}

std::string SessionKv::CompressionConfig(const rt::Conversation& conversation) const {
  return fmt::format("policy={};kv={}", conversation.policy(), KvPrecisionName(Precision()));
}

void SessionKv::RunQueuedCommit(const std::string& session_key) {
  if (Status s = CommitToStore(session_key); !s.ok()) {
    FZ_LOG_WARN(
        "session '{}': committing its KV to the store failed: {} (kept in engine memory; "
        "retried at its next turn and at drain)",
        SessionIdOfKey(session_key), MessageOf(s));
  }
}

Status SessionKv::CommitToStore(const std::string& session_key) {
  if (kv_cache_ == nullptr) return absl::OkStatus();
  bool lost = false;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return absl::OkStatus();
    const SessionState& state = it->second;
    if ((state.store_current && !state.chain_lost) || state.released) return absl::OkStatus();
    lost = state.chain_lost;
  }
  // The next segment hangs off the session's last block in the store. If the store no longer
  // holds the chain, a segment stored now could never be restored: start the chain over. (Only
  // this worker changes the chain, so the answer holds until the export below.)
  if (!lost) {
    FZ_ASSIGN_OR_RETURN(const bool present, kv_cache_->ChainPresent(session_key));
    if (!present) {
      chains_lost_.fetch_add(1, std::memory_order_relaxed);
      FZ_LOG_WARN(
          "session '{}': its KV is no longer in the store (restarted empty, flushed, failed over "
          "or evicted); committing its whole conversation as a full segment",
          SessionIdOfKey(session_key));
    }
    lost = !present;
  }
  // Hold the conversation while its pages are read (a turn starting on it waits in Attach); the
  // store is written after letting go.
  rt::Conversation* conversation = nullptr;
  engine::kv::SegmentMark since;
  std::vector<std::array<uint8_t, 32>> media;
  size_t messages = 0;
  uint64_t finished = 0;
  std::string config;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return absl::OkStatus();
    SessionState& state = it->second;
    // A turn runs on it again: that turn's commit, queued when it ends, covers this one.
    if ((state.store_current && !state.chain_lost) || state.released || state.busy ||
        state.conversation == nullptr) {
      return absl::OkStatus();
    }
    if (lost) StartChainOver(state);
    state.exporting = true;
    conversation = state.conversation.get();
    since = state.mark;
    media = state.pending_media;
    messages = state.messages_fed;
    finished = state.finished_turns;
    config = CompressionConfig(*conversation);
  }
  StatusOr<rt::ConversationSegment> segment =
      engine_->ExportConversation(*conversation, since, kv_max_block_bytes_);
  bool release_now = false;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);  // kept while exporting (Release defers)
    if (it != sessions_.end()) {
      it->second.exporting = false;
      release_now = it->second.released && !it->second.busy;
    }
  }
  export_cv_.notify_all();
  if (release_now) {  // deleted while its pages were read
    ReleaseSession(session_key);
    return absl::OkStatus();
  }
  if (!segment.ok()) return segment.status();
  // What is left of a lost chain: unpinned and deleted (nothing can restore from it).
  if (lost) kv_cache_->Release(session_key);
  const size_t blocks = segment->encoded.blocks.size();
  FZ_RETURN_IF_ERROR(kv_cache_->CommitSegment(session_key, std::move(segment->encoded.blocks),
                                              segment->tokens, media, config, Precision(),
                                              messages));
  if (lost) {
    FZ_LOG_INFO(
        "session '{}': durable again: its KV committed to the store as one full segment "
        "({} blocks)",
        SessionIdOfKey(session_key), blocks);
  }
  bool orphaned = false;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) {
      orphaned = true;
    } else {
      SessionState& state = it->second;
      state.mark = std::move(segment->encoded.next_mark);
      state.committed_media.insert(state.committed_media.end(), media.begin(), media.end());
      // Media of turns kept since the export stay pending.
      state.pending_media.erase(
          state.pending_media.begin(),
          state.pending_media.begin() +
              static_cast<std::ptrdiff_t>(std::min(media.size(), state.pending_media.size())));
      state.stored_messages = messages;
      state.chain_lost = false;
      ++state.chain_serial;
      state.store_current = state.finished_turns == finished;
    }
  }
  // Released while its blocks were written: they belong to no one.
  if (orphaned) kv_cache_->Release(session_key);
  return absl::OkStatus();
}

void SessionKv::StartChainOver(SessionState& state) {
  state.chain_lost = true;
  state.mark = {};
  // A full segment shows every medium of the conversation (they key its first block).
  state.committed_media.insert(state.committed_media.end(), state.pending_media.begin(),
                               state.pending_media.end());
  state.pending_media = std::move(state.committed_media);
  state.committed_media.clear();
  ++state.chain_serial;
}

void SessionKv::CheckChains(bool store_up) {
  struct Due {
    Clock::time_point checked;
    std::string key;
    uint64_t serial;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, state] : sessions_) {
      // A busy session is committing or about to: its commit checks the chain itself.
      if (state.busy || state.chain_lost || kv_cache_->segments(key) == 0) continue;
      due.push_back({state.chain_checked, key, state.chain_serial});
    }
  }
  const size_t n = std::min(due.size(), kChainChecksPerCall);
  std::partial_sort(due.begin(), due.begin() + n, due.end(),
                    [](const Due& a, const Due& b) { return a.checked < b.checked; });
  for (size_t i = 0; i < n; ++i) {
    StatusOr<bool> present = kv_cache_->ChainPresent(due[i].key);
    if (!present.ok()) return;  // the store cannot be reached: Health says so
    std::lock_guard lock(mu_);
    auto it = sessions_.find(due[i].key);
    if (it == sessions_.end()) continue;
    SessionState& state = it->second;
    state.chain_checked = Clock::now();
    // A commit that ended meanwhile may have started the chain over: this answer is stale.
    if (*present || state.busy || state.chain_serial != due[i].serial) continue;
    state.chain_lost = true;
    chains_lost_.fetch_add(1, std::memory_order_relaxed);
    FZ_LOG_WARN(
        "session '{}': its KV is no longer in the store (restarted empty, flushed, failed over or "
        "evicted): committing its whole conversation again",
        SessionIdOfKey(due[i].key));
  }
  // Not while the store cannot take them (unreachable, a tier down): each try would export a
  // whole conversation in vain, on every housekeeping pass.
  if (store_up) RecommitLostChains();
}

void SessionKv::RecommitLostChains() {
  // Idle sessions whose chain is lost are written again now, not at their next turn (which may
  // never come): a pod that dies later would lose them although the store is back. Off this
  // thread when there is a commit queue; a session already waiting there is not queued twice.
  std::vector<std::string> lost;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, state] : sessions_) {
      if (state.chain_lost && !state.busy && !state.released && state.conversation != nullptr &&
          state.messages_fed > 0 && (commit_queue_ == nullptr || !commit_queue_->Pending(key))) {
        lost.push_back(key);
      }
    }
  }
  for (const std::string& key : lost) {
    if (commit_queue_ != nullptr) {
      (void)commit_queue_->Enqueue(key);  // refused when full: the next check tries again
    } else if (Status s = CommitToStore(key); !s.ok()) {
      FZ_LOG_WARN("session '{}': its KV could not be committed again yet: {}",
                  SessionIdOfKey(key), MessageOf(s));
    }
  }
}

KvDurability SessionKv::DurabilityOf(const std::string& session_key,
                                     const SessionState& state) const {
  if (state.chain_lost) return KvDurability::kNotDurable;
  if (state.store_current || state.messages_fed == 0) return KvDurability::kDurable;
  // A finished turn whose KV the store does not hold yet: on its way, or its commit was deferred
  // (queue full) or failed.
  return commit_queue_ != nullptr && commit_queue_->Pending(session_key)
             ? KvDurability::kPending
             : KvDurability::kNotDurable;
}

KvDurability SessionKv::Durability(const std::string& session_key) const {
  if (kv_cache_ == nullptr) return KvDurability::kNoStore;
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  return it == sessions_.end() ? KvDurability::kDurable : DurabilityOf(session_key, it->second);
}

Status SessionKv::ReserveForRestore(const TurnRequest& request, KvReservations& kv,
                                    uint64_t bytes) {
  // Running turns were promised their KV: wait for room (they finish, idle sessions are
  // evicted) rather than take it, up to the turn's deadline or a minute.
  const Clock::time_point give_up =
      std::min(request.deadline, Clock::now() + std::chrono::seconds(60));
  for (;;) {
    if (kv.TryReserve(bytes)) return absl::OkStatus();
    EvictIdle(bytes);
    if (kv.TryReserve(bytes)) return absl::OkStatus();
    if (request.cancel_flag && request.cancel_flag->load()) {
      return CancelledError("the client cancelled the call");
    }
    if (Clock::now() >= give_up) {
      return ResourceExhaustedError(
          "KV budget exceeded: restoring the session's {} bytes of KV found no room while other "
          "turns run; retry later",
          bytes);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

StatusOr<rt::RestoredConversation> SessionKv::RestoreFromStore(const TurnRequest& request,
                                                               KvReservations& kv, double* seconds,
                                                               KvTier* tier) {
  const std::string& session_key = request.session_key;
  const auto t0 = Clock::now();
  FZ_ASSIGN_OR_RETURN(LoadedSessionKv loaded, kv_cache_->Load(session_key));
  std::vector<engine::kv::DecodedSegment> segments;
  segments.reserve(loaded.segments.size());
  for (const std::vector<std::string>& blocks : loaded.segments) {
    FZ_ASSIGN_OR_RETURN(engine::kv::DecodedSegment d, engine::kv::DecodeSegment(blocks));
    segments.push_back(std::move(d));
  }
  // The codec's bytes hold every page image whole (plus positions and headers): an upper bound
  // of the pages the restore allocates.
  FZ_RETURN_IF_ERROR(ReserveForRestore(request, kv, loaded.bytes));
  StatusOr<rt::RestoredConversation> attempt = engine_->RestoreConversation(segments);
  kv.Release(loaded.bytes);  // the pages, if any, now count as used
  if (!attempt.ok()) return attempt.status();
  rt::RestoredConversation restored = *std::move(attempt);
  *seconds = Seconds(Clock::now() - t0);
  switch (loaded.slowest_tier) {
    case kvstore::Tier::kHost:
      *tier = KvTier::kHost;
      break;
    case kvstore::Tier::kDisk:
      *tier = KvTier::kDisk;
      break;
    case kvstore::Tier::kRedis:
      *tier = KvTier::kRedis;
      break;
    case kvstore::Tier::kRemote:
      *tier = KvTier::kRemote;
      break;
  }
  FZ_LOG_INFO(
      "session '{}': restored {} tokens of KV from the store ({} segments, {} bytes, {} "
      "tier) in {:.3f} s",
      SessionIdOfKey(session_key), restored.conversation->cached_tokens(), segments.size(),
      loaded.bytes, KvTierName(*tier), *seconds);
  return restored;
}

void SessionKv::EndTurn(const std::string& session_key) {
  bool released = false;
  bool commit = false;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return;
    it->second.busy = false;
    it->second.last_used = Clock::now();
    released = it->second.released;
    commit = it->second.commit_wanted && !released;
    it->second.commit_wanted = false;
  }
  // Released while this turn ran (DeleteSession): nothing of it is kept.
  if (released) {
    ReleaseSession(session_key);
    return;
  }
  // Never blocks: a full queue leaves the session behind the store (counted, logged by the
  // queue), for its next commit or the drain to write.
  if (commit && commit_queue_ != nullptr) (void)commit_queue_->Enqueue(session_key);
}

uint64_t SessionKv::EvictIdle(uint64_t bytes) {
  if (kv_cache_ == nullptr) return 0;
  std::vector<std::unique_ptr<rt::Conversation>> evicted;
  uint64_t freed = 0;
  {
    std::lock_guard lock(mu_);
    std::vector<std::pair<Clock::time_point, SessionState*>> idle;
    for (auto& [id, state] : sessions_) {
      // Only a session whose KV the store holds whole can be restored from it.
      if (state.conversation != nullptr && !state.busy && !state.exporting && state.store_current &&
          !state.chain_lost) {
        idle.emplace_back(state.last_used, &state);
      }
    }
    std::sort(idle.begin(), idle.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [when, state] : idle) {
      if (freed >= bytes) break;
      freed += state->conversation->kv_bytes();
      evicted.push_back(std::move(state->conversation));
    }
  }
  if (!evicted.empty()) {
    FZ_LOG_INFO("KV budget: evicted {} idle sessions ({} bytes) to the KV store", evicted.size(),
                freed);
  }
  return freed;  // the conversations (and their pages) are freed here
}

void SessionKv::DropConversation(const std::string& session_key, rt::Conversation* expected) {
  std::unique_ptr<rt::Conversation> dropped;
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  if (it == sessions_.end() || it->second.conversation.get() != expected) return;
  // The session's last committed state may be in the store: the next turn restores it. Without a
  // store (or before any commit) it starts over from the first message.
  dropped = std::move(it->second.conversation);
  if (kv_cache_ == nullptr || kv_cache_->segments(session_key) == 0) {
    it->second.messages_fed = 0;
  }
  it->second.kv_bytes = 0;
  it->second.kv_bytes_by_format = {};
}

std::vector<KvBytes> SessionKv::ReleaseSession(const std::string& session_key) {
  return Release(session_key, /*keep_in_store=*/false);
}

std::vector<KvBytes> SessionKv::ForgetSession(const std::string& session_key) {
  return Release(session_key, /*keep_in_store=*/true);
}

std::vector<KvBytes> SessionKv::Release(const std::string& session_key, bool keep_in_store) {
  uint64_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return {};
    // A running turn holds a pointer to the conversation: its end (EndTurn) frees everything,
    // and Commit refuses to keep anything meanwhile.
    if (it->second.busy || it->second.exporting) {
      it->second.released = true;
      return {};
    }
    bytes = it->second.conversation != nullptr ? it->second.kv_bytes : 0;
    // The pages are freed before the lock is let go, not after the store's Release below (a
    // network call): admission, having found no session it could evict (it takes this lock),
    // must then see these bytes free, or it would refuse a turn for memory that is on its way
    // back.
    sessions_.erase(it);
  }
  std::vector<KvBytes> freed;
  if (bytes > 0) freed.push_back({KvTier::kDevice, Precision(), bytes});
  if (kv_cache_ != nullptr) {
    for (const KvBytes& b : kv_cache_->Release(session_key, keep_in_store)) freed.push_back(b);
  }
  return freed;
}

std::vector<KvBytes> SessionKv::Bytes(const std::string& session_key) const {
  std::vector<KvBytes> out;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return {};
    if (it->second.conversation != nullptr && it->second.kv_bytes > 0) {
      // By page format as of the conversation's last turn (a compressing policy mixes f16, int4
      // and int2 pages); the total alone when no breakdown is known (a restored conversation).
      // The copy KeepTurn took: the conversation may be in a step on another thread right now.
      const engine::kv::KvBytesByFormat& by_format = it->second.kv_bytes_by_format;
      uint64_t known = 0;
      for (size_t f = 0; f < by_format.size(); ++f) {
        if (by_format[f] == 0) continue;
        known += by_format[f];
        out.push_back(
            {KvTier::kDevice, PrecisionOf(static_cast<engine::kv::KvFormat>(f)), by_format[f]});
      }
      if (known != it->second.kv_bytes) {
        out.clear();
        out.push_back({KvTier::kDevice, Precision(), it->second.kv_bytes});
      }
    }
  }
  if (kv_cache_ != nullptr) {
    for (const KvBytes& b : kv_cache_->Bytes(session_key)) out.push_back(b);
  }
  return out;
}

SharedKvState SessionKv::ExportShared(const std::string& session_key) {
  if (kv_cache_ == nullptr) return {};
  // A turn's revision is published (off the step thread) once its commit landed, so another
  // replica restores the whole turn; a commit deferred or stuck on the store is not waited for
  // longer than this (the other replica then re-prefills what the store lacks).
  constexpr auto kCommitWait = std::chrono::seconds(30);
  if (commit_queue_ != nullptr) commit_queue_->WaitFor(session_key, Clock::now() + kCommitWait);
  {
    std::lock_guard lock(mu_);
    if (sessions_.find(session_key) == sessions_.end()) return {};
  }
  SharedKvState out = kv_cache_->SharedState(session_key);  // segments and messages, together
  out.precision = Precision();
  return out;
}

Status SessionKv::AdoptShared(const std::string& session_key, const SharedKvState& kv) {
  if (kv_cache_ == nullptr) return absl::OkStatus();
  {
    std::unique_lock lock(mu_);
    export_cv_.wait(lock, [&] {
      auto it = sessions_.find(session_key);
      return it == sessions_.end() || !it->second.exporting;
    });
    SessionState& state = sessions_[session_key];
    if (state.busy) {
      return FailedPreconditionError("session '{}' has a turn running on this replica",
                                     SessionIdOfKey(session_key));
    }
    // Whatever this replica held of the session is behind the store's revision: the next turn
    // restores the store's KV (or re-prefills when it has none).
    // Its pages are freed under the lock, as Release frees them.
    state.conversation.reset();
    state.messages_fed = kv.segments.empty() ? 0 : kv.stored_messages;
    state.stored_messages = state.messages_fed;
    state.kv_bytes = 0;
    state.kv_bytes_by_format = {};
    state.cached_tokens = 0;
    state.store_current = true;
    state.mark = {};
    state.pending_media.clear();
    state.committed_media.clear();
    state.chain_lost = false;
    ++state.chain_serial;
  }
  kv_cache_->Adopt(session_key, kv);
  return absl::OkStatus();
}

KvStoreHealth SessionKv::Health() {
  if (kv_cache_ == nullptr) return {};
  KvStoreHealth health = kv_cache_->Health();
  if (commit_queue_ != nullptr) {
    const CommitQueue::Counters c = commit_queue_->counters();
    health.commit_queue_depth = c.depth;
    health.commits_deferred = c.refused;
    health.commits_coalesced = c.coalesced;
  }
  health.chains_lost = chains_lost_.load(std::memory_order_relaxed);
  // Also after a failed commit: the store may be back, lacking the chains (and a commit that
  // succeeds is what clears the failure).
  CheckChains(health.tiers_up);
  std::lock_guard lock(mu_);
  for (const auto& [key, state] : sessions_) {
    if (!state.released && DurabilityOf(key, state) == KvDurability::kNotDurable) {
      ++health.sessions_not_durable;
    }
  }
  return health;
}

uint32_t SessionKv::CachedTokens(const std::string& session_key) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  return it == sessions_.end() ? 0 : it->second.cached_tokens;
}

Status SessionKv::Flush() {
  if (kv_cache_ == nullptr) {
    std::lock_guard lock(mu_);
    if (!sessions_.empty()) {
      FZ_LOG_WARN("drain: {} sessions' KV not flushed (kvstore: none)", sessions_.size());
    }
    return absl::OkStatus();
  }
  // The commits queued first; then the sessions still behind the store (their commit was
  // deferred, failed, or their chain was lost) get another try, here (no turn runs any more).
  if (commit_queue_ != nullptr) commit_queue_->Flush();
  std::vector<std::string> behind;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, state] : sessions_) {
      if (state.conversation != nullptr && (!state.store_current || state.chain_lost) &&
          !state.busy && state.messages_fed > 0) {
        behind.push_back(id);
      }
    }
  }
  Status first_error;
  for (const std::string& id : behind) {
    if (Status s = CommitToStore(id); !s.ok()) {
      FZ_LOG_ERROR("drain: session '{}' KV not flushed: {}", SessionIdOfKey(id), MessageOf(s));
      first_error.Update(s);
    }
  }
  StatusOr<FlushReport> report = kv_cache_->Flush();
  if (!report.ok()) return report.status();
  FZ_LOG_INFO("drain: session KV flushed to the store: {} sessions, {} blocks, {} bytes",
              report->sessions, report->blocks, report->bytes);
  return first_error;
}

}  // namespace framezip::server
