// WriteKvSlots and WriteKvPageRuns on every device present (device_cases.h): a batch's K/V rows
// stored into slots of f32 and f16 pages given by a slot table in the device's memory (as a step
// plan uploads it), in an order unrelated to the rows'. f32 slots hold the rows exactly; f16 slots
// hold each value rounded to nearest even, exactly (the reference rounds the f64 values the same
// way); slots the table does not name are left as they were.
#include "engine/ops/kv_slots.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/half.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

// Element e of a page buffer (f32 or f16) on the host, as f64.
double ValueAt(const Tensor& t, int64_t e) {
  return t.dtype() == DType::kF32 ? double{t.data<float>()[e]}
                                  : double{F16ToF32(t.data<Float16>()[e])};
}

TEST_CASE("WriteKvSlots stores each row in its slot, f32 exactly and f16 rounded, on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t rows = 7, channels = 96, slots_per_page = 5;
  const auto k = MakeRandom({rows, channels}, DType::kF32, rng);
  const auto v = MakeRandom({rows, channels}, DType::kF32, rng);
  for (const DType page_dtype : {DType::kF32, DType::kF16}) {
    CAPTURE(DTypeName(page_dtype));
    const size_t elem = DTypeSize(page_dtype);
    // Row i goes to slot order[i] of a page of slots_per_page·rows slots (most stay untouched).
    std::vector<int64_t> order(static_cast<size_t>(slots_per_page * rows));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(static_cast<size_t>(rows));
    const int64_t page_elems = slots_per_page * rows * channels;
    ForEachDevice([&](const Device& device) {
      const Tensor keys = PoisonedOn({page_elems}, device, page_dtype);
      const Tensor values = PoisonedOn({page_elems}, device, page_dtype);
      std::vector<ops::KvSlot> table(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) {
        const size_t at = static_cast<size_t>(order[static_cast<size_t>(i)] * channels) * elem;
        table[static_cast<size_t>(i)].k = static_cast<char*>(keys.raw_data()) + at;
        table[static_cast<size_t>(i)].v = static_cast<char*>(values.raw_data()) + at;
        table[static_cast<size_t>(i)].kind =
            page_dtype == DType::kF32 ? ops::KvSlotKind::kF32 : ops::KvSlotKind::kF16;
      }
      const Tensor table_on_device = *Tensor::Empty(
          {static_cast<int64_t>(table.size() * sizeof(ops::KvSlot))}, DType::kU8, device);
      REQUIRE(CopyBytes(table_on_device.raw_data(), device, table.data(), Device::Cpu(),
                        table.size() * sizeof(ops::KvSlot))
                  .ok());
      const Tensor k_on = On(k.tensor, device), v_on = On(v.tensor, device);
      const Status st =
          ops::WriteKvSlots(device, static_cast<const ops::KvSlot*>(table_on_device.raw_data()),
                            rows, channels, k_on.data<float>(), v_on.data<float>());
      INFO(st.ToString());
      REQUIRE(st.ok());
      const Tensor got_k = *keys.To(Device::Cpu()), got_v = *values.To(Device::Cpu());
      const std::vector<double> want_k = RoundedTo(k.values, page_dtype);
      const std::vector<double> want_v = RoundedTo(v.values, page_dtype);
      std::vector<bool> written(static_cast<size_t>(slots_per_page * rows), false);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t slot = order[static_cast<size_t>(i)];
        written[static_cast<size_t>(slot)] = true;
        for (int64_t c = 0; c < channels; ++c) {
          CAPTURE(i, slot, c);
          REQUIRE(ValueAt(got_k, slot * channels + c) ==
                  want_k[static_cast<size_t>(i * channels + c)]);
          REQUIRE(ValueAt(got_v, slot * channels + c) ==
                  want_v[static_cast<size_t>(i * channels + c)]);
        }
      }
      for (int64_t slot = 0; slot < slots_per_page * rows; ++slot) {
        if (written[static_cast<size_t>(slot)]) continue;
        CAPTURE(slot);
        REQUIRE(std::isnan(ValueAt(got_k, slot * channels)));  // still the poison
      }
    });
  }
}

TEST_CASE("WriteKvPageRuns stores runs of rows in page slots exactly on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t channels = 64;
  // More runs than one launch takes (ops::kKvPageRunsPerLaunch), of 1 to 5 rows, into slots of
  // one buffer in an order unrelated to the rows', with gaps left unwritten.
  const int64_t num_runs = ops::kKvPageRunsPerLaunch + 37;
  std::uniform_int_distribution<int32_t> length(1, 5);
  std::vector<int32_t> lengths(static_cast<size_t>(num_runs));
  int64_t rows = 0;
  for (int32_t& n : lengths) rows += (n = length(rng));
  const int64_t slots = 2 * rows;
  std::vector<int64_t> starts(static_cast<size_t>(num_runs));  // each run's first slot
  {
    std::vector<int64_t> order(static_cast<size_t>(num_runs));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int64_t at = 0;
    for (const int64_t r : order) {
      starts[static_cast<size_t>(r)] = at;
      at += 2 * lengths[static_cast<size_t>(r)];  // a run's own slots, then as many left alone
    }
  }
  const auto k = MakeRandom({rows, channels}, DType::kF32, rng);
  const auto v = MakeRandom({rows, channels}, DType::kF32, rng);
  for (const DType page_dtype : {DType::kF32, DType::kF16}) {
    CAPTURE(DTypeName(page_dtype));
    const size_t row_bytes = static_cast<size_t>(channels) * DTypeSize(page_dtype);
    ForEachDevice([&](const Device& device) {
      const Tensor keys = PoisonedOn({slots * channels}, device, page_dtype);
      const Tensor values = PoisonedOn({slots * channels}, device, page_dtype);
      std::vector<ops::KvPageRun> runs;
      int64_t src = 0;
      for (int64_t r = 0; r < num_runs; ++r) {
        const size_t at = static_cast<size_t>(starts[static_cast<size_t>(r)]) * row_bytes;
        runs.push_back({static_cast<char*>(keys.raw_data()) + at,
                        static_cast<char*>(values.raw_data()) + at, src,
                        lengths[static_cast<size_t>(r)],
                        page_dtype == DType::kF32 ? ops::KvSlotKind::kF32 : ops::KvSlotKind::kF16});
        src += lengths[static_cast<size_t>(r)];
      }
      const Tensor k_on = On(k.tensor, device), v_on = On(v.tensor, device);
      const Status st =
          ops::WriteKvPageRuns(device, runs, channels, k_on.data<float>(), v_on.data<float>());
      INFO(st.ToString());
      REQUIRE(st.ok());
      const Tensor got_k = *keys.To(Device::Cpu()), got_v = *values.To(Device::Cpu());
      const std::vector<double> want_k = RoundedTo(k.values, page_dtype);
      const std::vector<double> want_v = RoundedTo(v.values, page_dtype);
      for (int64_t r = 0; r < num_runs; ++r) {
        const ops::KvPageRun& run = runs[static_cast<size_t>(r)];
        const int64_t slot0 = starts[static_cast<size_t>(r)];
        for (int64_t t = 0; t < run.rows; ++t) {
          for (int64_t c = 0; c < channels; ++c) {
            CAPTURE(r, t, c);
            const size_t want_at = static_cast<size_t>((run.src_row + t) * channels + c);
            REQUIRE(ValueAt(got_k, (slot0 + t) * channels + c) == want_k[want_at]);
            REQUIRE(ValueAt(got_v, (slot0 + t) * channels + c) == want_v[want_at]);
          }
        }
        // The slots after the run's own stay as they were.
        REQUIRE(std::isnan(ValueAt(got_k, (slot0 + run.rows) * channels)));
      }
    });
  }
}

TEST_CASE("WriteKvSlots refuses a null table or negative counts", "[unit][engine][ops]") {
  const float row[4] = {};
  CHECK(ops::WriteKvSlots(Device::Cpu(), nullptr, 1, 4, row, row).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ops::WriteKvSlots(Device::Cpu(), nullptr, -1, 4, row, row).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ops::WriteKvSlots(Device::Cpu(), nullptr, 0, 4, row, row).ok());
}

}  // namespace
}  // namespace framezip::engine::test
