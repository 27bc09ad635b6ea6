// Backend entry points of ops/cast.cc; inputs are already checked.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status CastCpu(const Tensor& in, Tensor& out);
Status CastCuda(const Tensor& in, Tensor& out);

}  // namespace framezip::engine::ops
