// Linear on the CPU: for many rows, the AMX bf16 GEMM (gemm_amx.h) where the weight is bf16 and
// the CPU has AMX, else tiles of the weight converted to f32 + OpenBLAS sgemm; the GEMV kernel
// of cpu_kernels.cc for few rows (up to 16, and up to 64 of a long 16-bit weight without AMX).
// Parallel over output tiles on ComputePool(); OpenBLAS itself runs single-threaded inside each
// task.
#include <cblas.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/amx_weight_cache.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/gemm_amx.h"
#include "engine/ops/linear.h"
#include "engine/ops/linear_int8_cpu.h"

namespace framezip::engine::ops {
namespace {

// Tile sizes of the sgemm path: a [kTileN, K] f32 weight tile (<= 1 MB for K <= 1024) is
// converted once per run of tasks on it and reused for up to kTileM rows of x at a time;
// conversion and A-packing overheads are then ~1/(2·256) of the multiply-adds on long inputs.
constexpr int64_t kTileM = 256;
constexpr int64_t kTileN = 256;

// Rows up to which a 16-bit weight with an inner dimension of at least kGemvMinInnerWithoutAmx
// still goes through the GEMV kernel where AMX does not run it: the kernel reads the weight as
// stored, while the sgemm path widens every tile to f32 on each call, a cost that does not shrink
// with the rows. On Qwen2-0.5B's MLP shapes (K = 896 and 4864, bf16) on a Zen 3 core the GEMV
// kernel was 1.1-2.3x faster at every m from 17 to 64, on one thread and two (a follow-up
// question's prefill); at K = 128 (the tiny model) sgemm stayed faster, its per-output sums being
// too short for the kernel's horizontal adds (docs/cpu-backend.md).
constexpr int64_t kGemvMaxRowsWithoutAmx = 64;
constexpr int64_t kGemvMinInnerWithoutAmx = 512;

// Fewest rows a tile is cut to so that every thread has one: sgemm's packing stays a small part
// of a tile's work.
constexpr int64_t kMinTileM = 32;

// Rows per tile of a product whose rows are split across `column_tasks` other tasks (column tiles
// of W, batch entries) on a pool of `threads`: m in equal tiles of at most kTileM, and more of them
// while some thread of the pool would get no task and the tiles keep kMinTileM rows. So 278 rows
// run as 139 + 139, not 256 + 22, and the 75 rows a Dynamic-LLaVA layer keeps as 38 + 37 on two
// threads: with one column tile (the q/k/v/o projections) both had left the second thread idle for
// most of the product.
int64_t RowsPerTile(int64_t m, int64_t column_tasks, int64_t threads) {
  const int64_t for_threads = std::min((threads + column_tasks - 1) / column_tasks, m / kMinTileM);
  const int64_t tiles = std::max<int64_t>({1, (m + kTileM - 1) / kTileM, for_threads});
  return std::max<int64_t>(1, (m + tiles - 1) / tiles);
}

// Columns of W per task of the AMX path: a packed [128, K] strip of W (224 KiB at K = 896) stays
// in L2 while every 32-row strip of x passes it; 64 and 256 were slower on a Sapphire Rapids
// core (docs/cpu-backend.md).
constexpr int64_t kAmxTileN = 128;

void AddBias(const Tensor& bias, int64_t m0, int64_t m1, int64_t j0, int64_t j1, float* y,
             int64_t n) {
  if (!bias.defined()) return;
  std::vector<float> b(static_cast<size_t>(j1 - j0));
  const size_t elem = DTypeSize(bias.dtype());
  cpu::ToF32(static_cast<const char*>(bias.raw_data()) + j0 * elem, bias.dtype(), j1 - j0,
             b.data());
  for (int64_t m = m0; m < m1; ++m) {
    float* row = y + m * n + j0;
    for (int64_t j = 0; j < j1 - j0; ++j) row[j] += b[static_cast<size_t>(j)];
  }
}

// The calling thread's buffer for its prepared tile of W (packed bf16 or widened f32), kept
// across calls so that a prefill does not allocate per tile.
template <typename T>
std::vector<T>& ThreadBuffer() {
  thread_local std::vector<T> buffer;
  return buffer;
}

// Splits y [m, n] into tiles of rows_per_tile × cols_per_tile over ComputePool() and calls
// multiply(m0, m1, j0, j1) for each. Tasks are numbered column tile first, so consecutive tasks
// share a column tile of W: a thread calls prepare_columns(j0, j1) (convert or pack that tile
// into its own buffer) once per run of tasks on the same tile, not once per task.
void ForEachOutputTile(int64_t m, int64_t n, int64_t rows_per_tile, int64_t cols_per_tile,
                       const std::function<void(int64_t, int64_t)>& prepare_columns,
                       const std::function<void(int64_t, int64_t, int64_t, int64_t)>& multiply) {
  const int64_t tiles_m = (m + rows_per_tile - 1) / rows_per_tile;
  const int64_t tiles_n = (n + cols_per_tile - 1) / cols_per_tile;
  ComputePool().ParallelFor(tiles_m * tiles_n, 1, [&](int64_t t0, int64_t t1) {
    int64_t prepared_tile = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t tn = t / tiles_m, tm = t % tiles_m;
      const int64_t j0 = tn * cols_per_tile, j1 = std::min(n, j0 + cols_per_tile);
      const int64_t m0 = tm * rows_per_tile, m1 = std::min(m, m0 + rows_per_tile);
      if (prepared_tile != tn) {
        prepare_columns(j0, j1);
        prepared_tile = tn;
      }
      multiply(m0, m1, j0, j1);
    }
  });
}

// x is packed (rounded to bf16) once by all threads; then each task multiplies kAmxTileN columns
// of W, packed once per weight (amx_weight_cache.h) or, for a view, by the task itself, with a
// range of rows. Rows are split only when W has too few column tiles to keep every thread busy
// (k_proj, v_proj).
void LinearAmx(const float* x, int64_t m, int64_t k, const Tensor& weight, int64_t n,
               const Tensor& bias, float* y) {
  const auto* w = static_cast<const uint16_t*>(weight.raw_data());
  const std::shared_ptr<const std::vector<uint16_t>> packed_w =
      cpu::PackedAmxWeight(weight, kAmxTileN);
  const int64_t strip_size = cpu::AmxPackedColumnsSize(kAmxTileN, k);
  ThreadPool& pool = ComputePool();
  // The caller's, reused across calls of the usual sizes (a 2048-row chunk at K = 4864 is
  // 19 MiB); a longer prefill's is given back at the end instead of staying with the thread.
  constexpr size_t kKeptPackedBytes = size_t{32} << 20;
  thread_local std::vector<uint16_t> x_packed_buffer;
  x_packed_buffer.resize(static_cast<size_t>(cpu::AmxPackedRowsSize(m, k)));
  uint16_t* x_packed = x_packed_buffer.data();
  const int64_t row_blocks16 = (m + 31) / 32 * 2;  // x is padded to whole 32-row blocks
  pool.ParallelFor(row_blocks16, 4, [&](int64_t b0, int64_t b1) {
    cpu::PackRowsForAmx(x, m, k, k, b0, b1, x_packed);
  });

  const int64_t tiles_n = (n + kAmxTileN - 1) / kAmxTileN;
  const int64_t row_steps = (m + 31) / 32;
  const int64_t tiles_m =
      std::clamp<int64_t>((4 * pool.num_threads() + tiles_n - 1) / tiles_n, 1, row_steps);
  const int64_t rows_per_tile = (row_steps + tiles_m - 1) / tiles_m * 32;
  ForEachOutputTile(
      m, n, rows_per_tile, kAmxTileN,
      [&](int64_t j0, int64_t j1) {
        if (packed_w != nullptr) return;
        std::vector<uint16_t>& w_packed = ThreadBuffer<uint16_t>();
        w_packed.resize(static_cast<size_t>(cpu::AmxPackedColumnsSize(j1 - j0, k)));
        cpu::PackBf16ColumnsForAmx(w + j0 * k, j1 - j0, k, k, w_packed.data());
      },
      [&](int64_t m0, int64_t m1, int64_t j0, int64_t j1) {
        const uint16_t* w_tile = packed_w != nullptr
                                     ? packed_w->data() + (j0 / kAmxTileN) * strip_size
                                     : ThreadBuffer<uint16_t>().data();
        cpu::AmxGemm(x_packed, m0, m1, w_tile, j1 - j0, k, y + j0, n);
        AddBias(bias, m0, m1, j0, j1, y, n);
      });
  if (x_packed_buffer.capacity() * sizeof(uint16_t) > kKeptPackedBytes) {
    std::vector<uint16_t>().swap(x_packed_buffer);
  }
}

}  // namespace

void PrepareLinearWeight(const Tensor& weight) {
  if (weight.device().is_cpu() && weight.dtype() == DType::kBF16 && cpu::AmxGemmEnabled()) {
    cpu::PackedAmxWeight(weight, kAmxTileN);
  }
}

void PrepareLinearWeight(const Tensor& weight, const Tensor& weight_scale) {
  if (!weight_scale.defined()) return PrepareLinearWeight(weight);
  PrepareLinearInt8Weight(weight, weight_scale);
}

Status LinearCpu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  const int64_t n = weight.dim(0), k = weight.dim(1);
  float* yp = static_cast<float*>(y.raw_data());
  if (k == 0) {  // empty sums: y is the bias (no row count can be read from x's zero elements)
    const int64_t m = y.numel() / std::max<int64_t>(n, 1);
    std::fill_n(yp, y.numel(), 0.0f);
    AddBias(bias, 0, m, 0, n, yp, n);
    return absl::OkStatus();
  }
  const int64_t m = x.numel() / k;
  const float* xp = static_cast<const float*>(x.raw_data());
  const DType wdt = weight.dtype();
  const char* wp = static_cast<const char*>(weight.raw_data());
  const size_t welem = DTypeSize(wdt);
  ThreadPool& pool = ComputePool();

  const bool amx = wdt == DType::kBF16 && cpu::AmxGemmEnabled();
  const bool short_prefill_gemv =
      !amx && wdt != DType::kF32 && k >= kGemvMinInnerWithoutAmx && m <= kGemvMaxRowsWithoutAmx;
  if (m <= kLinearGemvMaxRows || short_prefill_gemv) {
    // Split the weight rows over threads; each reads its rows once for all m rows of x. Past 16
    // rows a chunk is made smaller in proportion, so the threads still share a short prefill.
    const int64_t grain = std::max<int64_t>(
        16, (1 << 16) / (std::max<int64_t>(k, 1) * std::max<int64_t>(1, m / kLinearGemvMaxRows)));
    pool.ParallelFor(n, grain, [&](int64_t j0, int64_t j1) {
      cpu::GemvRows(xp, m, k, wp, wdt, k, j0, j1, yp, n);
      AddBias(bias, 0, m, j0, j1, yp, n);
    });
    return absl::OkStatus();
  }

  if (amx) {
    LinearAmx(xp, m, k, weight, n, bias, yp);
    return absl::OkStatus();
  }

  cpu::EnsureBlasSingleThreaded();
  ForEachOutputTile(
      m, n, RowsPerTile(m, (n + kTileN - 1) / kTileN, pool.num_threads()), kTileN,
      [&](int64_t j0, int64_t j1) {
        if (wdt == DType::kF32) return;
        std::vector<float>& w_tile = ThreadBuffer<float>();
        w_tile.resize(static_cast<size_t>(kTileN * k));
        cpu::ToF32(wp + j0 * k * welem, wdt, (j1 - j0) * k, w_tile.data());
      },
      [&](int64_t m0, int64_t m1, int64_t j0, int64_t j1) {
        const float* wf = wdt == DType::kF32 ? reinterpret_cast<const float*>(wp) + j0 * k
                                             : ThreadBuffer<float>().data();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m1 - m0),
                    static_cast<int>(j1 - j0), static_cast<int>(k), 1.0f, xp + m0 * k,
                    static_cast<int>(k), wf, static_cast<int>(k), 0.0f, yp + m0 * n + j0,
                    static_cast<int>(n));
        AddBias(bias, m0, m1, j0, j1, yp, n);
      });
  return absl::OkStatus();
}

// 16-bit operands are widened to f32 once (exact), then every batch entry is tiled like one
// plain GEMM; tiles of all entries share one parallel loop.
Status MatMulCpu(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c) {
  cpu::EnsureBlasSingleThreaded();
  const int64_t m = a.dim(-2), k = a.dim(-1), n = c.dim(-1);
  const int64_t batch = m * n == 0 ? 0 : c.numel() / (m * n);
  if (k == 0) {  // an empty sum (sgemm would refuse lda = 0 and leave c as it was)
    std::fill_n(c.data<float>(), c.numel(), 0.0f);
    return absl::OkStatus();
  }
  const bool b_shared = b.rank() == 2;
  std::vector<float> a32, b32;  // the widened copies, when a and b are 16-bit
  const float* ap = static_cast<const float*>(a.raw_data());
  const float* bp = static_cast<const float*>(b.raw_data());
  if (a.dtype() != DType::kF32) {
    a32.resize(static_cast<size_t>(a.numel()));
    b32.resize(static_cast<size_t>(b.numel()));
    cpu::ToF32(a.raw_data(), a.dtype(), a.numel(), a32.data());
    cpu::ToF32(b.raw_data(), b.dtype(), b.numel(), b32.data());
    ap = a32.data();
    bp = b32.data();
  }
  float* cp = c.data<float>();
  ThreadPool& pool = ComputePool();
  const int64_t tiles_n = (n + kTileN - 1) / kTileN;
  const int64_t rows_per_tile =
      RowsPerTile(m, std::max<int64_t>(1, batch * tiles_n), pool.num_threads());
  const int64_t tiles_m = (m + rows_per_tile - 1) / rows_per_tile;
  const int64_t per_entry = tiles_m * tiles_n;
  pool.ParallelFor(batch * per_entry, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t e = t / per_entry, tile = t % per_entry;
      const int64_t tn = tile / tiles_m, tm = tile % tiles_m;
      const int64_t j0 = tn * kTileN, j1 = std::min(n, j0 + kTileN);
      const int64_t m0 = tm * rows_per_tile, m1 = std::min(m, m0 + rows_per_tile);
      const float* ae = ap + e * m * k;
      const float* be = b_shared ? bp : bp + e * k * n;
      const float* bt = transpose_b ? be + j0 * k : be + j0;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                  static_cast<int>(m1 - m0), static_cast<int>(j1 - j0), static_cast<int>(k), 1.0f,
                  ae + m0 * k, static_cast<int>(k), bt, static_cast<int>(transpose_b ? k : n), 0.0f,
                  cp + e * m * n + m0 * n + j0, static_cast<int>(n));
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
