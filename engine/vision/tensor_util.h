// Small helpers shared by the vision files (internal to engine/vision); all but NewF32 read host
// memory.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::vision {

// Element i of a f32/f16/bf16 tensor as f32.
float LoadAsF32(const Tensor& t, int64_t i);

// All elements of a f32/f16/bf16 tensor as f32 (copies; for small tables like biases, position
// embeddings and image_newline).
std::vector<float> ToF32(const Tensor& t);

// A new uninitialised f32 tensor on `device`, with the allocation error annotated by `what`.
StatusOr<Tensor> NewF32(Shape shape, const char* what, Device device = Device::Cpu());

}  // namespace framezip::engine::vision
