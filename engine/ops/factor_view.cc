#include "engine/ops/factor_view.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {

void FactorView::DecodeRows(int64_t first, int64_t n, float* out) const {
  const int64_t begin = first * cols, count = n * cols;
  switch (format) {
    case Format::kF32:
      std::memcpy(out, f32 + begin, static_cast<size_t>(count) * sizeof(float));
      return;
    case Format::kF16:
      cpu::ToF32(f16 + begin, DType::kF16, count, out);
      return;
    case Format::kInt4:
      break;
  }
  // A group's scales are widened once for all its rows in the range.
  thread_local std::vector<float> scale_f32;
  scale_f32.resize(static_cast<size_t>(cols));
  for (int64_t r = first; r < first + n;) {
    const int64_t group = r / group_rows;
    const int64_t end = std::min(first + n, (group + 1) * group_rows);
    cpu::ToF32(scales + group * cols, DType::kF16, cols, scale_f32.data());
    for (; r < end; ++r) {
      cpu::DequantizeInt4Row(packed, r * cols, cols, scale_f32.data(), out + (r - first) * cols);
    }
  }
}

}  // namespace framezip::engine::ops
