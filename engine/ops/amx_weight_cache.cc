#include "engine/ops/amx_weight_cache.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "engine/core/thread_pool.h"
#include "engine/ops/gemm_amx.h"

namespace framezip::engine::ops::cpu {
namespace {

struct Entry {
  std::weak_ptr<void> owner;  // the weight buffer's ownership when it was packed
  int64_t n = 0, k = 0, strip_cols = 0;
  std::shared_ptr<const std::vector<uint16_t>> packed;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<const void*, Entry> entries;
};

Cache& TheCache() {
  static Cache* cache = new Cache;  // never destroyed: Linear may run during static teardown
  return *cache;
}

bool SameOwner(const std::weak_ptr<void>& a, const std::weak_ptr<void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

std::shared_ptr<const std::vector<uint16_t>> Pack(const uint16_t* w, int64_t n, int64_t k,
                                                  int64_t strip_cols) {
  const int64_t strips = (n + strip_cols - 1) / strip_cols;
  const int64_t strip_size = AmxPackedColumnsSize(strip_cols, k);
  auto packed = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(strips * strip_size));
  ComputePool().ParallelFor(strips, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t j0 = s * strip_cols, cols = std::min(strip_cols, n - j0);
      PackBf16ColumnsForAmx(w + j0 * k, cols, k, k, packed->data() + s * strip_size);
    }
  });
  return packed;
}

}  // namespace

std::shared_ptr<const std::vector<uint16_t>> PackedAmxWeight(const Tensor& weight,
                                                             int64_t strip_cols) {
  if (!weight.buffer().owns_memory() || weight.dtype() != DType::kBF16 || weight.rank() != 2) {
    return nullptr;
  }
  const int64_t n = weight.dim(0), k = weight.dim(1);
  const std::weak_ptr<void> owner = weight.buffer().ownership();
  const void* key = weight.raw_data();
  Cache& cache = TheCache();
  const auto cached = [&]() -> std::shared_ptr<const std::vector<uint16_t>> {
    auto it = cache.entries.find(key);
    if (it != cache.entries.end() && !it->second.owner.expired() &&
        SameOwner(it->second.owner, owner) && it->second.n == n && it->second.k == k &&
        it->second.strip_cols == strip_cols) {
      return it->second.packed;
    }
    return nullptr;
  };
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto packed = cached()) return packed;
  }
  // Packed without the lock: the packing runs a ParallelFor, and a thread inside a loop body
  // that asked for another weight would otherwise wait on the lock while we wait for the pool.
  auto packed = Pack(static_cast<const uint16_t*>(key), n, k, strip_cols);
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto raced = cached()) return raced;  // another thread packed it meanwhile
  // Entries of freed weights go as new ones come (a model unloaded and another loaded).
  std::erase_if(cache.entries, [](const auto& e) { return e.second.owner.expired(); });
  cache.entries[key] =
      Entry{.owner = owner, .n = n, .k = k, .strip_cols = strip_cols, .packed = packed};
  return packed;
}

size_t PackedAmxWeightBytes() {
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  size_t bytes = 0;
  for (const auto& [key, e] : cache.entries) {
    if (!e.owner.expired()) bytes += e.packed->size() * sizeof(uint16_t);
  }
  return bytes;
}

}  // namespace framezip::engine::ops::cpu
