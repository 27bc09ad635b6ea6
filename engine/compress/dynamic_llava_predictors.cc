#include "engine/compress/dynamic_llava_predictors.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/linear.h"
#include "engine/ops/op_checks.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::compress {
namespace {

constexpr const char* kWho = "dynamic_llava predictors";

Status CheckDense(const DenseWeights& w, int64_t out, int64_t in, const std::string& name) {
  FZ_RETURN_IF_ERROR(ops::CheckWeightShape(kWho, w.weight, {out, in}, name + ".weight", false));
  return ops::CheckWeightShape(kWho, w.bias, {out}, name + ".bias", false);
}

Status CheckNorm(const NormWeights& w, int64_t c, const std::string& name) {
  FZ_RETURN_IF_ERROR(ops::CheckWeightShape(kWho, w.weight, {c}, name + ".weight", false));
  return ops::CheckWeightShape(kWho, w.bias, {c}, name + ".bias", false);
}

Status CheckHead(const DenseWeights& fc1, const DenseWeights& fc2, const DenseWeights& fc3,
                 int64_t width, const std::string& prefix) {
  FZ_RETURN_IF_ERROR(CheckDense(fc1, width / 2, width, prefix + "fc1"));
  FZ_RETURN_IF_ERROR(CheckDense(fc2, width / 4, width / 2, prefix + "fc2"));
  return CheckDense(fc3, 2, width / 4, prefix + "fc3");
}

StatusOr<Tensor> NewF32(Shape shape, Device device) {
  return Tensor::Empty(std::move(shape), DType::kF32, device);
}

// y = x·Wᵀ + b into a fresh [rows, out] tensor.
StatusOr<Tensor> Dense(const Tensor& x, const DenseWeights& w) {
  FZ_ASSIGN_OR_RETURN(Tensor y, NewF32({x.dim(0), w.weight.dim(0)}, x.device()));
  FZ_RETURN_IF_ERROR(ops::Linear(x, w.weight, w.bias, y));
  return y;
}

StatusOr<Tensor> DenseGelu(const Tensor& x, const DenseWeights& w) {
  FZ_ASSIGN_OR_RETURN(Tensor y, Dense(x, w));
  FZ_RETURN_IF_ERROR(ops::Gelu(y, ops::GeluApproximation::kErf, y));
  return y;
}

StatusOr<Tensor> Norm(const Tensor& x, const NormWeights& w, float eps) {
  FZ_ASSIGN_OR_RETURN(Tensor y, NewF32(x.shape(), x.device()));
  FZ_RETURN_IF_ERROR(ops::LayerNorm(x, w.weight, w.bias, eps, y));
  return y;
}

// The shared tail of both predictors: fc3(GELU(fc2(GELU(fc1(x))))).
StatusOr<Tensor> Head(const Tensor& x, const DenseWeights& fc1, const DenseWeights& fc2,
                      const DenseWeights& fc3) {
  FZ_ASSIGN_OR_RETURN(const Tensor a, DenseGelu(x, fc1));
  FZ_ASSIGN_OR_RETURN(const Tensor b, DenseGelu(a, fc2));
  return Dense(b, fc3);
}

// x [N, W] in place through one pre-LN ViT block whose MHA sees all N rows.
Status VitBlock(const PredictorVitBlock& blk, int64_t heads, float eps, Tensor& x) {
  const int64_t n = x.dim(0), w = x.dim(1), hd = w / heads;
  FZ_ASSIGN_OR_RETURN(const Tensor h, Norm(x, blk.norm1, eps));
  FZ_ASSIGN_OR_RETURN(const Tensor q, Dense(h, blk.q));
  FZ_ASSIGN_OR_RETURN(const Tensor k, Dense(h, blk.k));
  FZ_ASSIGN_OR_RETURN(const Tensor v, Dense(h, blk.v));
  FZ_ASSIGN_OR_RETURN(Tensor attn, NewF32({1, n, heads, hd}, x.device()));
  FZ_ASSIGN_OR_RETURN(const Tensor q4, q.Reshape({1, n, heads, hd}));
  FZ_ASSIGN_OR_RETURN(const Tensor k4, k.Reshape({1, n, heads, hd}));
  FZ_ASSIGN_OR_RETURN(const Tensor v4, v.Reshape({1, n, heads, hd}));
  FZ_RETURN_IF_ERROR(ops::BidirectionalAttention(q4, k4, v4, attn));
  FZ_ASSIGN_OR_RETURN(const Tensor attn2, attn.Reshape({n, w}));
  FZ_ASSIGN_OR_RETURN(const Tensor projected, Dense(attn2, blk.proj));
  FZ_RETURN_IF_ERROR(ops::Add(x, projected, x));
  FZ_ASSIGN_OR_RETURN(const Tensor h2, Norm(x, blk.norm2, eps));
  FZ_ASSIGN_OR_RETURN(const Tensor m, DenseGelu(h2, blk.fc1));
  FZ_ASSIGN_OR_RETURN(const Tensor out, Dense(m, blk.fc2));
  return ops::Add(x, out, x);
}

// [x[:, :W/2] | mean over rows of x[:, W/2:]]: the local half per row, the global half shared.
StatusOr<Tensor> LocalGlobal(const Tensor& x) {
  const int64_t n = x.dim(0), w = x.dim(1), half = w / 2;
  const Device device = x.device();
  // The mean as one [1, N]·[N, W] product with weights 1/N, so it runs where x is.
  FZ_ASSIGN_OR_RETURN(Tensor host_weights, NewF32({1, n}, Device::Cpu()));
  std::fill_n(host_weights.data<float>(), n, 1.0f / static_cast<float>(n));
  Tensor weights = host_weights;
  if (!device.is_cpu()) {
    FZ_ASSIGN_OR_RETURN(weights, host_weights.To(device));
  }
  FZ_ASSIGN_OR_RETURN(Tensor mean, NewF32({1, w}, device));
  FZ_RETURN_IF_ERROR(ops::MatMul(weights, x, /*transpose_b=*/false, mean));
  FZ_ASSIGN_OR_RETURN(Tensor y, NewF32({n, w}, device));
  FZ_RETURN_IF_ERROR(ops::CopyRowSlices(device, n, half, {.data = x.data<float>(), .stride = w},
                                        {.data = y.data<float>(), .stride = w}));
  const std::vector<int32_t> row_zero(static_cast<size_t>(n), 0);
  FZ_RETURN_IF_ERROR(ops::CopyRowSlices(
      device, n, half, {.data = mean.data<float>(), .stride = w, .col0 = half, .rows = row_zero},
      {.data = y.data<float>(), .stride = w, .col0 = half}));
  return y;
}

}  // namespace

StatusOr<std::shared_ptr<const DynamicLlavaPredictors>> DynamicLlavaPredictors::Create(
    PredictorConfig config, ImagePredictorWeights image, TextPredictorWeights text) {
  const int64_t c = config.hidden, w = config.width;
  if (c <= 0 || w <= 0 || w % 4 != 0 || config.heads <= 0 || w % config.heads != 0 ||
      config.sparse_layer < 0) {
    return InvalidArgumentError(
        "{}: bad config (hidden {}, width {}, heads {}, sparse_layer {}): width must be a "
        "positive multiple of 4 and of heads",
        kWho, c, w, config.heads, config.sparse_layer);
  }
  FZ_RETURN_IF_ERROR(CheckNorm(image.in_norm, c, "image_predictor.in_norm"));
  FZ_RETURN_IF_ERROR(CheckDense(image.in_proj, w, c, "image_predictor.in_proj"));
  if (image.blocks.empty())
    return InvalidArgumentError("{}: the image predictor has no blocks", kWho);
  for (size_t b = 0; b < image.blocks.size(); ++b) {
    const PredictorVitBlock& blk = image.blocks[b];
    const std::string p = fmt::format("image_predictor.blocks.{}.", b);
    FZ_RETURN_IF_ERROR(CheckNorm(blk.norm1, w, p + "norm1"));
    FZ_RETURN_IF_ERROR(CheckNorm(blk.norm2, w, p + "norm2"));
    FZ_RETURN_IF_ERROR(CheckDense(blk.q, w, w, p + "qkv[q]"));
    FZ_RETURN_IF_ERROR(CheckDense(blk.k, w, w, p + "qkv[k]"));
    FZ_RETURN_IF_ERROR(CheckDense(blk.v, w, w, p + "qkv[v]"));
    FZ_RETURN_IF_ERROR(CheckDense(blk.proj, w, w, p + "proj"));
    const int64_t mlp = blk.fc1.weight.defined() ? blk.fc1.weight.dim(0) : 0;
    FZ_RETURN_IF_ERROR(CheckDense(blk.fc1, mlp, w, p + "fc1"));
    FZ_RETURN_IF_ERROR(CheckDense(blk.fc2, w, mlp, p + "fc2"));
  }
  FZ_RETURN_IF_ERROR(CheckHead(image.fc1, image.fc2, image.fc3, w, "image_predictor."));
  FZ_RETURN_IF_ERROR(CheckNorm(text.in_norm, c, "text_predictor.in_norm"));
  FZ_RETURN_IF_ERROR(CheckDense(text.in_proj, w, c, "text_predictor.in_proj"));
  FZ_RETURN_IF_ERROR(CheckHead(text.fc1, text.fc2, text.fc3, w, "text_predictor."));
  std::shared_ptr<DynamicLlavaPredictors> p(new DynamicLlavaPredictors());
  p->device_ = image.in_proj.weight.device();
  p->config_ = config;
  p->image_ = std::move(image);
  p->text_ = std::move(text);
  return std::shared_ptr<const DynamicLlavaPredictors>(std::move(p));
}

Status DynamicLlavaPredictors::CheckInput(const Tensor& hidden, const char* what) const {
  if (hidden.rank() != 2 || hidden.dim(0) == 0 || hidden.dim(1) != config_.hidden ||
      hidden.dtype() != DType::kF32 || hidden.device() != device_) {
    return InvalidArgumentError("{}: {} input is {} {} on {}, want [N > 0, {}] f32 on {}", kWho,
                                what, ShapeString(hidden.shape()), DTypeName(hidden.dtype()),
                                DeviceName(hidden.device()), config_.hidden, DeviceName(device_));
  }
  return absl::OkStatus();
}

StatusOr<Tensor> DynamicLlavaPredictors::ImageLogits(const Tensor& hidden) const {
  FZ_RETURN_IF_ERROR(CheckInput(hidden, "image"));
  const float eps = config_.norm_eps;
  FZ_ASSIGN_OR_RETURN(const Tensor normed, Norm(hidden, image_.in_norm, eps));
  FZ_ASSIGN_OR_RETURN(Tensor x, DenseGelu(normed, image_.in_proj));
  for (const PredictorVitBlock& blk : image_.blocks) {
    FZ_RETURN_IF_ERROR(VitBlock(blk, config_.heads, eps, x));
  }
  FZ_ASSIGN_OR_RETURN(const Tensor mixed, LocalGlobal(x));
  return Head(mixed, image_.fc1, image_.fc2, image_.fc3);
}

StatusOr<Tensor> DynamicLlavaPredictors::TextLogits(const Tensor& hidden) const {
  FZ_RETURN_IF_ERROR(CheckInput(hidden, "text"));
  FZ_ASSIGN_OR_RETURN(const Tensor normed, Norm(hidden, text_.in_norm, config_.norm_eps));
  FZ_ASSIGN_OR_RETURN(const Tensor x, DenseGelu(normed, text_.in_proj));
  return Head(x, text_.fc1, text_.fc2, text_.fc3);
}

}  // namespace framezip::engine::compress
