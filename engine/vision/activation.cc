#include "engine/vision/activation.h"

#include "engine/ops/activation.h"
#include "engine/ops/quick_gelu.h"

namespace framezip::engine::vision {

Status ApplyActivation(model::Activation act, Tensor& x) {
  switch (act) {
    case model::Activation::kGeluErf:
      return ops::Gelu(x, ops::GeluApproximation::kErf, x);
    case model::Activation::kGeluTanh:
      return ops::Gelu(x, ops::GeluApproximation::kTanh, x);
    case model::Activation::kQuickGelu:
      return ops::QuickGelu(x, x);
    case model::Activation::kSilu:
    case model::Activation::kRelu:
      break;
  }
  return UnimplementedError("vision: activation {} is not supported in the tower or projector",
                            model::ActivationName(act));
}

}  // namespace framezip::engine::vision
