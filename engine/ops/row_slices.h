// Moves row slices between f32 row-major matrices on one device: what sparse prefill
// (attention_sparse.h) does around its dense attention — a head range of chosen token rows
// gathered into a compact block, the past keys copied in front, the output scattered back.
//
// A slice set addresses element (i, c), c < width, of a matrix at
//   data[row(i) · stride + col0 + c],  row(i) = rows[i] when `rows` is given, else i.
// Row indices are host arrays (the CPU op's contract); on a GPU they are copied to the device for
// the launch. Pointers are raw because the past K/V of a layer are (attention_sparse.h); they must
// address memory on `device`.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/device.h"

namespace framezip::engine::ops {

struct SourceRows {
  const float* data = nullptr;
  int64_t stride = 0;  // floats between consecutive rows
  int64_t col0 = 0;
  std::span<const int32_t> rows = {};  // empty: rows 0, 1, ...
};

struct DestinationRows {
  float* data = nullptr;
  int64_t stride = 0;
  int64_t col0 = 0;
  std::span<const int32_t> rows = {};  // empty: rows 0, 1, ...; distinct when given
};

// dst(i, c) = src(i, c) for i < count, c < width. Errors: INVALID_ARGUMENT when an index list is
// neither empty nor `count` long, an index is negative, or a slice overruns its row
// (col0 + width > stride); UNIMPLEMENTED / UNAVAILABLE for a GPU without CUDA / without a GPU.
Status CopyRowSlices(Device device, int64_t count, int64_t width, const SourceRows& src,
                     const DestinationRows& dst);

}  // namespace framezip::engine::ops
