// Dynamic-LLaVA's two learned predictors (docs/methods.md §3), run over
// device-dispatched ops so they work wherever the decoder does.
//
//   image predictor, over the N visual rows of one block entering `sparse_layer`:
//     x = GELU(in_proj(LayerNorm(h)))                                  [N, W]
//     x = x + proj(MHA(LayerNorm1(x))); x = x + fc2(GELU(fc1(LayerNorm2(x))))   per ViT block
//     x = [x[:, :W/2] | mean over the N rows of x[:, W/2:]]           local | global
//     logits = fc3(GELU(fc2(GELU(fc1(x)))))                            [N, 2], logit 0 = keep
//   text predictor, per decode row: logits = fc3(GELU(fc2(GELU(fc1(GELU(in_proj(LayerNorm(h))))))))
//
// GELU is the erf form (torch's default); the MHA sees every row of the block (no mask) with
// softmax scale 1/sqrt(W/heads). The weights are tools/train/train_predictors.py's modules,
// tensor for tensor (runtime/predictor_loading.h reads them).
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::compress {

struct DenseWeights {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out]
};

struct NormWeights {
  Tensor weight;  // [C]
  Tensor bias;    // [C]
};

struct PredictorVitBlock {
  NormWeights norm1, norm2;
  DenseWeights q, k, v;  // the rows of the checkpoint's fused qkv, split [q | k | v]
  DenseWeights proj, fc1, fc2;
};

struct ImagePredictorWeights {
  NormWeights in_norm;
  DenseWeights in_proj;
  std::vector<PredictorVitBlock> blocks;
  DenseWeights fc1, fc2, fc3;
};

struct TextPredictorWeights {
  NormWeights in_norm;
  DenseWeights in_proj, fc1, fc2, fc3;
};

// The largest |output-text keep margin| a config or policy option may set: logit differences of
// real predictors are a few units; anything near this is a broken file or a typo.
inline constexpr double kMaxTextThreshold = 1e6;

// What predictors_config.json says about how the predictors were trained and are meant to run.
struct PredictorConfig {
  int sparse_layer = 2;           // the predictors read the hidden states entering this layer
  double vision_keep_rate = 0.2;  // the image keep fraction they were trained for
  double text_keep_rate = 0.5;    // the output-text keep fraction they were trained for
  // A generated token is kept when logit 0 − logit 1 exceeds this: 0 is the paper's argmax rule;
  // tools/train calibrates another value when the predictor meets its budget only in expectation
  // (near p = 0.5 on every token, where argmax keeps all of them).
  double text_threshold = 0;  // |value| <= kMaxTextThreshold
  int64_t hidden = 0;         // the decoder's hidden size (the predictors' input width)
  int64_t width = 0;          // W
  int64_t heads = 0;          // MHA heads of the ViT blocks
  float norm_eps = 1e-5f;     // every LayerNorm's (torch's default)
};

class DynamicLlavaPredictors {
 public:
  // Checks every tensor's shape against `config` (INVALID_ARGUMENT naming the first bad one) and
  // keeps the weights where they are: the predictors run on the device of their weights.
  static StatusOr<std::shared_ptr<const DynamicLlavaPredictors>> Create(PredictorConfig config,
                                                                        ImagePredictorWeights image,
                                                                        TextPredictorWeights text);

  const PredictorConfig& config() const { return config_; }
  Device device() const { return device_; }

  // hidden [N, hidden] f32 on device(): the visual rows of one block -> logits [N, 2] f32 on
  // device(). INVALID_ARGUMENT for a wrong shape or device.
  StatusOr<Tensor> ImageLogits(const Tensor& hidden) const;
  // hidden [M, hidden] f32 on device(), one row per token -> logits [M, 2] f32 on device().
  StatusOr<Tensor> TextLogits(const Tensor& hidden) const;

 private:
  DynamicLlavaPredictors() = default;
  Status CheckInput(const Tensor& hidden, const char* what) const;

  PredictorConfig config_;
  ImagePredictorWeights image_;
  TextPredictorWeights text_;
  Device device_;
};

}  // namespace framezip::engine::compress
