#include "engine/compress/random_predictors.h"

#include <cmath>
#include <random>

namespace framezip::engine::compress {
namespace {

class WeightSource {
 public:
  WeightSource(uint64_t seed, Device device) : rng_(seed), device_(device) {}

  StatusOr<DenseWeights> Dense(int64_t out, int64_t in) {
    DenseWeights d;
    FZ_ASSIGN_OR_RETURN(d.weight, Normal({out, in}, 1.f / std::sqrt(static_cast<float>(in)), 0));
    FZ_ASSIGN_OR_RETURN(d.bias, Normal({out}, 0.1f, 0));
    return d;
  }
  StatusOr<NormWeights> Norm(int64_t c) {
    NormWeights n;
    FZ_ASSIGN_OR_RETURN(n.weight, Normal({c}, 0.1f, 1.f));
    FZ_ASSIGN_OR_RETURN(n.bias, Normal({c}, 0.1f, 0));
    return n;
  }

 private:
  // mean + stddev · N(0, 1), placed on the device.
  StatusOr<Tensor> Normal(Shape shape, float stddev, float mean) {
    FZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(shape), DType::kF32));
    std::normal_distribution<float> normal(mean, stddev);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng_);
    if (device_.is_cpu()) return t;
    return t.To(device_);
  }

  std::mt19937_64 rng_;
  Device device_;
};

}  // namespace

StatusOr<std::shared_ptr<const DynamicLlavaPredictors>> MakeRandomPredictors(
    const RandomPredictorOptions& o) {
  WeightSource src(o.seed, o.device);
  const int64_t w = o.width;
  ImagePredictorWeights image;
  FZ_ASSIGN_OR_RETURN(image.in_norm, src.Norm(o.hidden));
  FZ_ASSIGN_OR_RETURN(image.in_proj, src.Dense(w, o.hidden));
  for (int b = 0; b < o.blocks; ++b) {
    PredictorVitBlock blk;
    FZ_ASSIGN_OR_RETURN(blk.norm1, src.Norm(w));
    FZ_ASSIGN_OR_RETURN(blk.norm2, src.Norm(w));
    FZ_ASSIGN_OR_RETURN(blk.q, src.Dense(w, w));
    FZ_ASSIGN_OR_RETURN(blk.k, src.Dense(w, w));
    FZ_ASSIGN_OR_RETURN(blk.v, src.Dense(w, w));
    FZ_ASSIGN_OR_RETURN(blk.proj, src.Dense(w, w));
    FZ_ASSIGN_OR_RETURN(blk.fc1, src.Dense(o.mlp_ratio * w, w));
    FZ_ASSIGN_OR_RETURN(blk.fc2, src.Dense(w, o.mlp_ratio * w));
    image.blocks.push_back(std::move(blk));
  }
  FZ_ASSIGN_OR_RETURN(image.fc1, src.Dense(w / 2, w));
  FZ_ASSIGN_OR_RETURN(image.fc2, src.Dense(w / 4, w / 2));
  FZ_ASSIGN_OR_RETURN(image.fc3, src.Dense(2, w / 4));
  TextPredictorWeights text;
  FZ_ASSIGN_OR_RETURN(text.in_norm, src.Norm(o.hidden));
  FZ_ASSIGN_OR_RETURN(text.in_proj, src.Dense(w, o.hidden));
  FZ_ASSIGN_OR_RETURN(text.fc1, src.Dense(w / 2, w));
  FZ_ASSIGN_OR_RETURN(text.fc2, src.Dense(w / 4, w / 2));
  FZ_ASSIGN_OR_RETURN(text.fc3, src.Dense(2, w / 4));
  PredictorConfig config;
  config.hidden = o.hidden;
  config.width = w;
  config.heads = o.heads;
  return DynamicLlavaPredictors::Create(config, std::move(image), std::move(text));
}

}  // namespace framezip::engine::compress
