#include "server/upload_registry.h"

#include <vector>

namespace framezip::server {
namespace {

int64_t Ns(UploadRegistry::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

std::shared_ptr<UploadRegistry::Entry> UploadRegistry::Register(std::function<void()> expire) {
  auto entry = std::make_shared<Entry>(std::move(expire));
  entry->last_touch_ns_.store(Ns(Clock::now()));
  std::lock_guard lock(mu_);
  entries_.push_back(entry);
  return entry;
}

void UploadRegistry::Touch(Entry& entry) { entry.last_touch_ns_.store(Ns(Clock::now())); }

void UploadRegistry::Unregister(Entry& entry) {
  {
    std::lock_guard entry_lock(entry.mu_);  // waits for an expire in progress
    entry.expire_ = nullptr;
  }
  std::lock_guard lock(mu_);
  entries_.remove_if([&](const std::shared_ptr<Entry>& e) { return e.get() == &entry; });
}

int UploadRegistry::ExpireIdle(Clock::time_point now) {
  std::vector<std::shared_ptr<Entry>> idle;
  {
    std::lock_guard lock(mu_);
    const int64_t limit = Ns(now) - std::chrono::nanoseconds(idle_timeout_).count();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if ((*it)->last_touch_ns_.load() < limit) {
        idle.push_back(*it);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  int expired = 0;
  for (const auto& entry : idle) {
    std::lock_guard entry_lock(entry->mu_);
    if (!entry->expire_) continue;  // unregistered meanwhile
    std::function<void()> expire = std::move(entry->expire_);
    entry->expire_ = nullptr;
    expire();
    ++expired;
  }
  return expired;
}

size_t UploadRegistry::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace framezip::server
