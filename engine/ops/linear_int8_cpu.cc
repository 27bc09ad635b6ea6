// Linear with int8 weights on the CPU: x is quantised per row (in parallel), then either the
// GEMV kernel (few rows; AVX512-VNNI, AVX2 or portable) splits W's columns over the threads, or
// the AMX-INT8 kernel runs 128-column strips of W × row ranges of x as tasks, as LinearAmx does
// for bf16 (linear_cpu.cc).
//
// Every kernel reads W in one packed layout (gemm_int8.h), made once per weight and kept in a
// cache keyed by the int8 buffer (the contract of amx_weight_cache.h: a model's weights do not
// change while their buffer lives); a view is packed per call. A model keeps its weights packed
// only (PackLinearWeight, linear.h): the cache then knows the packed tensor as what it is.
#include "engine/ops/linear_int8_cpu.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/gemm_int8.h"
#include "engine/ops/linear.h"

namespace framezip::engine::ops {
namespace {

using cpu::Int8Kernel;
using cpu::PackedInt8Weight;

// Columns of W per task of the AMX path (as kAmxTileN of the bf16 path: a [128, K] strip stays
// in L2 while the row strips of x pass it).
constexpr int64_t kAmxTileN = 128;
// Columns per task of the GEMV path: the VNNI kernel's widest register tile.
constexpr int64_t kGemvCols = 64;

std::shared_ptr<const PackedInt8Weight> Pack(const Tensor& weight, const Tensor& weight_scale) {
  auto packed = std::make_shared<PackedInt8Weight>();
  cpu::SizePackedInt8Weight(weight.dim(0), weight.dim(1), *packed);
  const int8_t* q = static_cast<const int8_t*>(weight.raw_data());
  const float* scale = static_cast<const float*>(weight_scale.raw_data());
  ComputePool().ParallelFor(packed->col_blocks, 1, [&](int64_t b0, int64_t b1) {
    cpu::PackInt8Weight(q, scale, b0, b1, *packed);
  });
  return packed;
}

// A weight's packed form, keyed by the address of the weight's bytes. A row-major weight's entry
// holds its packed form (`held`); a packed-only weight (PackedOnlyInt8Weight) is its packed form,
// so its entry only points at it (a strong pointer would keep it alive forever).
struct Entry {
  std::weak_ptr<void> owner, scale_owner;
  const void* scale = nullptr;
  int64_t n = 0, k = 0;
  std::shared_ptr<const PackedInt8Weight> held;
  std::weak_ptr<const PackedInt8Weight> packed;
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

// The packed form of a packed-only weight (PackedOnlyInt8Weight), whatever buffer its scales come
// in (the packed form holds them); nullptr for any other weight. cache.mu held.
std::shared_ptr<const PackedInt8Weight> PackedOnlyLocked(const Cache& cache, const Tensor& weight) {
  if (!weight.buffer().owns_memory()) return nullptr;
  auto it = cache.entries.find(weight.raw_data());
  if (it == cache.entries.end()) return nullptr;
  const Entry& e = it->second;
  if (e.held != nullptr || e.owner.expired() || !SameOwner(e.owner, weight.buffer().ownership()) ||
      e.n != weight.dim(0) || e.k != weight.dim(1)) {
    return nullptr;
  }
  return e.packed.lock();
}

std::shared_ptr<const PackedInt8Weight> PackedWeight(const Tensor& weight,
                                                     const Tensor& weight_scale) {
  Cache& cache = TheCache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto packed = PackedOnlyLocked(cache, weight)) return packed;
  }
  if (!weight.buffer().owns_memory() || !weight_scale.buffer().owns_memory()) {
    return Pack(weight, weight_scale);
  }
  const std::weak_ptr<void> owner = weight.buffer().ownership();
  const std::weak_ptr<void> scale_owner = weight_scale.buffer().ownership();
  const void* key = weight.raw_data();
  const auto cached = [&]() -> std::shared_ptr<const PackedInt8Weight> {
    auto it = cache.entries.find(key);
    if (it == cache.entries.end()) return nullptr;
    const Entry& e = it->second;
    if (e.held == nullptr || e.owner.expired() || !SameOwner(e.owner, owner) ||
        !SameOwner(e.scale_owner, scale_owner) || e.scale != weight_scale.raw_data() ||
        e.n != weight.dim(0) || e.k != weight.dim(1)) {
      return nullptr;
    }
    return e.packed.lock();
  };
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto packed = cached()) return packed;
  }
  auto packed = Pack(weight, weight_scale);  // outside the lock (it runs a ParallelFor)
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto raced = cached()) return raced;
  std::erase_if(cache.entries, [](const auto& e) { return e.second.owner.expired(); });
  cache.entries[key] = Entry{.owner = owner,
                             .scale_owner = scale_owner,
                             .scale = weight_scale.raw_data(),
                             .n = weight.dim(0),
                             .k = weight.dim(1),
                             .held = packed,
                             .packed = packed};
  return packed;
}

}  // namespace

StatusOr<Tensor> PackedOnlyInt8Weight(const Tensor& weight, const Tensor& weight_scale) {
  const std::shared_ptr<const PackedInt8Weight> packed = PackedWeight(weight, weight_scale);
  // The tensor's memory is the packed bytes, owned through the packed weight itself (an aliasing
  // pointer), at least n·k of them (rows and columns are padded).
  const size_t bytes = packed->data.size();
  if (bytes < static_cast<size_t>(weight.numel())) {
    return InternalError("packed int8 weight [{}, {}] has {} bytes", weight.dim(0), weight.dim(1),
                         bytes);
  }
  std::shared_ptr<void> memory(packed, const_cast<int8_t*>(packed->data.data()));
  FZ_ASSIGN_OR_RETURN(Tensor kept, Tensor::FromBuffer(Buffer::Adopt(memory, bytes, Device::Cpu()),
                                                      0, weight.shape(), DType::kI8));
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  std::erase_if(cache.entries, [](const auto& e) { return e.second.owner.expired(); });
  cache.entries[kept.raw_data()] = Entry{.owner = kept.buffer().ownership(),
                                         .scale_owner = {},
                                         .scale = nullptr,
                                         .n = weight.dim(0),
                                         .k = weight.dim(1),
                                         .held = nullptr,
                                         .packed = packed};
  return kept;
}

void PrepareLinearInt8Weight(const Tensor& weight, const Tensor& weight_scale) {
  if (weight.device().is_cpu() && weight.buffer().owns_memory()) {
    PackedWeight(weight, weight_scale);
  }
}

Status LinearInt8Cpu(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                     const Tensor& bias, Tensor& y) {
  const int64_t n = weight.dim(0), k = weight.dim(1);
  float* yp = static_cast<float*>(y.raw_data());
  std::vector<float> b;  // the bias in f32, once per call (N values)
  if (bias.defined()) {
    b.resize(static_cast<size_t>(n));
    cpu::ToF32(bias.raw_data(), bias.dtype(), n, b.data());
  }
  const float* bp = b.empty() ? nullptr : b.data();
  if (k == 0) {  // empty sums: y is the bias
    const int64_t m = y.numel() / std::max<int64_t>(n, 1);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) yp[i * n + j] = bp ? bp[j] : 0.f;
    }
    return absl::OkStatus();
  }
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return absl::OkStatus();
  const std::shared_ptr<const PackedInt8Weight> packed = PackedWeight(weight, weight_scale);
  const int64_t kp = packed->k_padded();
  const Int8Kernel kernel = m <= kLinearGemvMaxRows ? cpu::Int8GemvKernel() : cpu::Int8GemmKernel();
  ThreadPool& pool = ComputePool();

  // The caller's buffers, reused across calls; a long prefill's are given back at the end.
  constexpr size_t kKeptBytes = size_t{32} << 20;
  thread_local std::vector<int8_t> xq_buffer, tiles_buffer;
  thread_local std::vector<float> x_scale_buffer;
  xq_buffer.resize(static_cast<size_t>(m * kp));
  x_scale_buffer.resize(static_cast<size_t>(m));
  int8_t* xq = xq_buffer.data();
  float* xs = x_scale_buffer.data();
  const float* xp = static_cast<const float*>(x.raw_data());
  const bool offset = cpu::Int8KernelWantsOffset(kernel);
  if (m * k <= (int64_t{1} << 16)) {  // a decode step's rows: not worth waking the pool
    cpu::QuantizeRowsInt8(xp, k, k, 0, m, offset, xq, kp, xs);
  } else {
    pool.ParallelFor(m, std::max<int64_t>(1, 8192 / k), [&](int64_t i0, int64_t i1) {
      cpu::QuantizeRowsInt8(xp, k, k, i0, i1, offset, xq, kp, xs);
    });
  }

  if (kernel != Int8Kernel::kAmx) {
    const int64_t groups = (n + kGemvCols - 1) / kGemvCols;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / (kGemvCols * kp * m));
    pool.ParallelFor(groups, grain, [&](int64_t g0, int64_t g1) {
      cpu::Int8GemvRows(kernel, xq, xs, m, *packed, g0 * kGemvCols, std::min(n, g1 * kGemvCols), bp,
                        yp, n);
    });
  } else {
    tiles_buffer.resize(static_cast<size_t>(cpu::AmxInt8PackedRowsSize(m, kp)));
    int8_t* tiles = tiles_buffer.data();
    const int64_t blocks16 = (m + 31) / 32 * 2;
    pool.ParallelFor(blocks16, 4, [&](int64_t b0, int64_t b1) {
      cpu::PackInt8RowsForAmx(xq, m, kp, b0, b1, tiles);
    });
    const int64_t tiles_n = (n + kAmxTileN - 1) / kAmxTileN;
    const int64_t row_steps = (m + 31) / 32;
    const int64_t tiles_m =
        std::clamp<int64_t>((4 * pool.num_threads() + tiles_n - 1) / tiles_n, 1, row_steps);
    const int64_t rows_per_tile = (row_steps + tiles_m - 1) / tiles_m * 32;
    const int64_t row_tiles = (m + rows_per_tile - 1) / rows_per_tile;
    // Consecutive tasks share a column strip, so a thread's strip of W stays in its cache.
    pool.ParallelFor(row_tiles * tiles_n, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t tn = t / row_tiles, tm = t % row_tiles;
        const int64_t j0 = tn * kAmxTileN, j1 = std::min(n, j0 + kAmxTileN);
        const int64_t m0 = tm * rows_per_tile, m1 = std::min(m, m0 + rows_per_tile);
        cpu::AmxInt8Gemm(tiles, xs, m0, m1, *packed, j0, j1, bp, yp, n);
      }
    });
    if (tiles_buffer.capacity() > kKeptBytes) std::vector<int8_t>().swap(tiles_buffer);
  }
  if (xq_buffer.capacity() > kKeptBytes) std::vector<int8_t>().swap(xq_buffer);
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
