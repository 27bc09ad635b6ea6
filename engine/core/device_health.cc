#include "engine/core/device_health.h"

#include <atomic>
#include <mutex>

#include "common/logging.h"

namespace framezip::engine {
namespace {

// The flag is read on every admission, so it is an atomic; the reason is written once and read
// rarely, so a mutex is enough for it.
std::atomic<bool> g_unhealthy{false};
std::mutex g_reason_mutex;
std::string& Reason() {
  static std::string* reason = new std::string();  // never destroyed: read during shutdown too
  return *reason;
}

}  // namespace

bool DeviceHealthy() { return !g_unhealthy.load(std::memory_order_acquire); }

std::string DeviceUnhealthyReason() {
  std::lock_guard<std::mutex> lock(g_reason_mutex);
  return Reason();
}

void MarkDeviceUnhealthy(const std::string& reason) {
  std::string first;
  {
    std::lock_guard<std::mutex> lock(g_reason_mutex);
    if (!Reason().empty()) return;  // the first sticky error is the informative one
    Reason() = reason.empty() ? std::string("unspecified device error") : reason;
    first = Reason();
  }
  g_unhealthy.store(true, std::memory_order_release);
  FZ_LOG_ERROR("GPU marked unhealthy, the process must restart: {}", first);
}

void ResetDeviceHealthForTesting() {
  std::lock_guard<std::mutex> lock(g_reason_mutex);
  Reason().clear();
  g_unhealthy.store(false, std::memory_order_release);
}

}  // namespace framezip::engine
