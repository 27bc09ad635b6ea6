// Applies a config-named activation in place on an f32 tensor, dispatching to engine/ops:
// kGeluErf / kGeluTanh -> ops::Gelu, kQuickGelu -> ops::QuickGelu. Other activations
// (silu, relu) are UNIMPLEMENTED for the vision path, naming the activation.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"

namespace framezip::engine::vision {

// x: f32, any shape, on the CPU; overwritten with act(x).
Status ApplyActivation(model::Activation act, Tensor& x);

}  // namespace framezip::engine::vision
