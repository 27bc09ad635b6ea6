#include "engine/ops/rope_table.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "engine/core/thread_pool.h"

namespace framezip::engine::ops {
namespace {

struct Tables {
  std::mutex mu;
  std::vector<std::shared_ptr<const RopeTable>> tables;  // one per RoPE (inverse frequencies)
};

Tables& TheTables() {
  static Tables* tables = new Tables;  // never destroyed: ops may run during static teardown
  return *tables;
}

}  // namespace

std::shared_ptr<const RopeTable> RopeTable::For(const RopeParams& rope, int64_t positions) {
  std::vector<float> inv = RopeInverseFrequencies(rope);
  const int64_t half = static_cast<int64_t>(inv.size());
  if (half == 0 || positions < 1) return nullptr;
  for (const float f : inv) {
    if (!std::isfinite(f)) return nullptr;  // no table could be found again for it (NaN != NaN)
  }
  Tables& all = TheTables();
  const auto find = [&]() {
    return std::find_if(all.tables.begin(), all.tables.end(),
                        [&](const auto& t) { return t->inv_freq_ == inv; });
  };
  int64_t size = 4096;
  {
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = find();
    if (it != all.tables.end() && (*it)->positions_ >= positions) return *it;
    if (it != all.tables.end()) size = std::max(size, (*it)->positions_);
  }
  while (size < positions) size *= 2;
  if (static_cast<size_t>(size * half) * 2 * sizeof(float) > kMaxBytes) return nullptr;
  // Built without the lock: the build runs a ParallelFor, and a thread inside a loop body that
  // rotated by another RoPE would otherwise wait on the lock while we wait for the pool.
  auto table = std::make_shared<RopeTable>();
  table->inv_freq_ = inv;
  table->half_ = half;
  table->positions_ = size;
  table->cos_.resize(static_cast<size_t>(size * half));
  table->sin_.resize(table->cos_.size());
  ComputePool().ParallelFor(size, 64, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        // f32 product as HF (position_ids.float() @ inv_freq), then cos/sin of that f32 value.
        const float f = static_cast<float>(p) * table->inv_freq_[i];
        table->cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(f)));
        table->sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(f)));
      }
    }
  });
  std::lock_guard<std::mutex> lock(all.mu);
  auto it = find();
  if (it == all.tables.end()) {
    if (all.tables.size() >= kMaxRopes) return nullptr;  // the caller computes its own angles
    all.tables.push_back(table);
  } else if ((*it)->positions_ < table->positions_) {
    *it = table;  // holders of the smaller one keep it alive until they are done
  } else {
    return *it;  // another thread built one as large meanwhile
  }
  return table;
}

}  // namespace framezip::engine::ops
