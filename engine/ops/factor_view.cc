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
  // A group's scales are widened once and repeated for each of its rows in the range, so the
  // rows of a group dequantise in one vectorised call: a factor row has only R = 8 or 16 codes,
  // fewer than one AVX-512 vector, and row by row the codes went through the scalar tail.
  thread_local std::vector<float> scale_f32;
  for (int64_t r = first; r < first + n;) {
    const int64_t group = r / group_rows;
    const int64_t end = std::min(first + n, (group + 1) * group_rows);
    scale_f32.resize(static_cast<size_t>((end - r) * cols));
    cpu::ToF32(scales + group * cols, DType::kF16, cols, scale_f32.data());
    for (int64_t i = 1; i < end - r; ++i) {
      std::copy_n(scale_f32.data(), cols, scale_f32.data() + i * cols);
    }
    cpu::DequantizeInt4Row(packed, r * cols, (end - r) * cols, scale_f32.data(),
                           out + (r - first) * cols);
    r = end;
  }
}

}  // namespace framezip::engine::ops
