#include "engine/core/step_counters.h"

#include <atomic>

namespace framezip::engine {
namespace {

struct Totals {
  std::atomic<int64_t> launches{0}, host_syncs{0}, host_to_device{0}, device_to_host{0},
      device_to_device{0}, plan_uploads{0};
};

Totals& TheTotals() {
  static Totals totals;
  return totals;
}

}  // namespace

StepCounts StepCounts::operator-(const StepCounts& earlier) const {
  return StepCounts{launches - earlier.launches,
                    host_syncs - earlier.host_syncs,
                    host_to_device - earlier.host_to_device,
                    device_to_host - earlier.device_to_host,
                    device_to_device - earlier.device_to_device,
                    plan_uploads - earlier.plan_uploads};
}

StepCounts ReadStepCounts() {
  const Totals& t = TheTotals();
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return StepCounts{t.launches.load(kRelaxed),         t.host_syncs.load(kRelaxed),
                    t.host_to_device.load(kRelaxed),   t.device_to_host.load(kRelaxed),
                    t.device_to_device.load(kRelaxed), t.plan_uploads.load(kRelaxed)};
}

void CountLaunches(int64_t n) { TheTotals().launches.fetch_add(n, std::memory_order_relaxed); }

void CountHostSync() { TheTotals().host_syncs.fetch_add(1, std::memory_order_relaxed); }

void CountCopy(CopyDirection direction) {
  Totals& t = TheTotals();
  switch (direction) {
    case CopyDirection::kHostToDevice:
      t.host_to_device.fetch_add(1, std::memory_order_relaxed);
      return;
    case CopyDirection::kDeviceToHost:
      t.device_to_host.fetch_add(1, std::memory_order_relaxed);
      return;
    case CopyDirection::kDeviceToDevice:
      t.device_to_device.fetch_add(1, std::memory_order_relaxed);
      return;
  }
}

void CountPlanUpload() { TheTotals().plan_uploads.fetch_add(1, std::memory_order_relaxed); }

}  // namespace framezip::engine
