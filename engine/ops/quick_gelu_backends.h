// Backend entry points of ops/quick_gelu.cc; inputs are already checked.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status QuickGeluCpu(const Tensor& x, Tensor& y);
Status QuickGeluCuda(const Tensor& x, Tensor& y);

}  // namespace framezip::engine::ops
