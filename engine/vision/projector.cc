#include "engine/vision/projector.h"

#include <utility>

#include "engine/ops/linear.h"
#include "engine/vision/activation.h"
#include "engine/vision/tensor_util.h"

namespace framezip::engine::vision {

StatusOr<Tensor> Project(const model::LlavaConfig& config, const ProjectorWeights& weights,
                         const Tensor& features) {
  const int64_t in = config.projector_input_dim(), H = config.text.hidden_size;
  if (features.rank() < 1 || features.dim(-1) != in || features.dtype() != DType::kF32) {
    return InvalidArgumentError("projector: features {} {} must be f32 with last dimension {}",
                                ShapeString(features.shape()), DTypeName(features.dtype()), in);
  }
  const int64_t M = features.numel() / in;
  const Device device = weights.linear1_weight.device();
  FZ_ASSIGN_OR_RETURN(Tensor x, features.Reshape({M, in}));
  if (x.device() != device) {
    FZ_ASSIGN_OR_RETURN(x, x.To(device));
  }
  FZ_ASSIGN_OR_RETURN(Tensor hidden, NewF32({M, H}, "projector hidden", device));
  FZ_RETURN_IF_ERROR(ops::Linear(x, weights.linear1_weight, weights.linear1_bias, hidden));
  FZ_RETURN_IF_ERROR(ApplyActivation(config.projector_hidden_act, hidden));
  Shape out_shape = features.shape();
  out_shape.back() = H;
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32({M, H}, "projector output", device));
  FZ_RETURN_IF_ERROR(ops::Linear(hidden, weights.linear2_weight, weights.linear2_bias, out));
  if (features.device() != device) {
    FZ_ASSIGN_OR_RETURN(out, out.To(features.device()));
  }
  return out.Reshape(out_shape);
}

StatusOr<ProjectorWeights> ProjectorWeightsOn(const ProjectorWeights& weights, Device device) {
  ProjectorWeights out = weights;
  for (Tensor* t : ProjectorTensors(out)) {
    if (t->defined()) {
      FZ_ASSIGN_OR_RETURN(*t, t->To(device));
    }
  }
  return out;
}

}  // namespace framezip::engine::vision
