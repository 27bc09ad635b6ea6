// Pins of active sessions on blocks: a pinned block is never evicted (host or disk tier) until
// every session's pin on it is removed or has expired. Pins expire so a crashed or forgetful
// client cannot hold memory forever (as SGLang's TTL pins of its hierarchical cache).
//
// Thread-safe (one internal mutex). Tiers call IsPinned with their own lock held; PinTable never
// calls out, so the lock order is always tier -> pin table.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvstore/types.h"

namespace framezip::kvstore {

class PinTable {
 public:
  using Clock = std::chrono::steady_clock;

  // Pins (or renews) `key` for `session` until `expiry`.
  void Pin(const std::string& session, const BlockKey& key, Clock::time_point expiry);
  // Removes one session's pin; true when it existed (and had not expired).
  bool Unpin(const std::string& session, const BlockKey& key);
  // Drops every pin on `key` (the block was deleted).
  void Forget(const BlockKey& key);
  bool IsPinned(const BlockKey& key, Clock::time_point now = Clock::now()) const;
  // Keys with at least one live pin.
  std::vector<BlockKey> PinnedKeys(Clock::time_point now = Clock::now()) const;
  // Removes expired pins; called now and then to bound memory.
  void Sweep(Clock::time_point now = Clock::now());

 private:
  mutable std::mutex mu_;
  std::unordered_map<BlockKey, std::map<std::string, Clock::time_point>, BlockKeyHash> pins_;
};

}  // namespace framezip::kvstore
