#include "kvstore/pin_table.h"

namespace framezip::kvstore {

void PinTable::Pin(const std::string& session, const BlockKey& key, Clock::time_point expiry) {
  std::lock_guard lock(mu_);
  pins_[key][session] = expiry;
}

bool PinTable::Unpin(const std::string& session, const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = pins_.find(key);
  if (it == pins_.end()) return false;
  auto s = it->second.find(session);
  if (s == it->second.end()) return false;
  const bool live = s->second > Clock::now();
  it->second.erase(s);
  if (it->second.empty()) pins_.erase(it);
  return live;
}

void PinTable::Forget(const BlockKey& key) {
  std::lock_guard lock(mu_);
  pins_.erase(key);
}

bool PinTable::IsPinned(const BlockKey& key, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  auto it = pins_.find(key);
  if (it == pins_.end()) return false;
  for (const auto& [session, expiry] : it->second) {
    if (expiry > now) return true;
  }
  return false;
}

std::vector<BlockKey> PinTable::PinnedKeys(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::vector<BlockKey> keys;
  for (const auto& [key, sessions] : pins_) {
    for (const auto& [session, expiry] : sessions) {
      if (expiry > now) {
        keys.push_back(key);
        break;
      }
    }
  }
  return keys;
}

void PinTable::Sweep(Clock::time_point now) {
  std::lock_guard lock(mu_);
  for (auto it = pins_.begin(); it != pins_.end();) {
    std::erase_if(it->second, [&](const auto& entry) { return entry.second <= now; });
    it = it->second.empty() ? pins_.erase(it) : std::next(it);
  }
}

}  // namespace framezip::kvstore
