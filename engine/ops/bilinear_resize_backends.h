// Backend entry points of ops/bilinear_resize.cc; inputs are already checked.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/bilinear_resize.h"

namespace framezip::engine::ops {

Status BilinearResizeCpu(const Tensor& in, Tensor& out, ImageLayout layout);

}  // namespace framezip::engine::ops
