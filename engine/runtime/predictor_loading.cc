#include "engine/runtime/predictor_loading.h"

#include <cmath>
#include <string>
#include <utility>

#include "common/logging.h"
#include "engine/model/config.h"
#include "engine/model/json_util.h"
#include "engine/model/safetensors.h"

namespace framezip::engine::runtime {
namespace {

using model::Json;
using model::JsonPath;

// Reads tensors of one file, f32 only (the predictors are trained and shipped in f32), placed on
// the target device.
class TensorReader {
 public:
  TensorReader(const model::SafetensorsFile& file, Device device) : file_(file), device_(device) {}

  StatusOr<Tensor> Get(const std::string& name) const {
    FZ_ASSIGN_OR_RETURN(Tensor t, file_.Get(name));
    if (t.dtype() != DType::kF32) {
      return InvalidArgumentError("{}: tensor {} is {}, want f32", file_.path().string(), name,
                                  DTypeName(t.dtype()));
    }
    if (device_.is_cpu()) return t;
    return t.To(device_);
  }
  StatusOr<compress::DenseWeights> Dense(const std::string& prefix) const {
    compress::DenseWeights w;
    FZ_ASSIGN_OR_RETURN(w.weight, Get(prefix + ".weight"));
    FZ_ASSIGN_OR_RETURN(w.bias, Get(prefix + ".bias"));
    return w;
  }
  StatusOr<compress::NormWeights> Norm(const std::string& prefix) const {
    compress::NormWeights w;
    FZ_ASSIGN_OR_RETURN(w.weight, Get(prefix + ".weight"));
    FZ_ASSIGN_OR_RETURN(w.bias, Get(prefix + ".bias"));
    return w;
  }

 private:
  const model::SafetensorsFile& file_;
  Device device_;
};

// Rows [part·n, (part+1)·n) of a fused [3n, in] weight and [3n] bias.
StatusOr<compress::DenseWeights> ThirdOf(const compress::DenseWeights& fused, int64_t part,
                                         const std::string& name) {
  const int64_t rows = fused.weight.dim(0);
  if (rows % 3 != 0 || fused.bias.rank() != 1 || fused.bias.dim(0) != rows) {
    return InvalidArgumentError("dynamic_llava predictors: {} has {} rows, not [q | k | v]", name,
                                rows);
  }
  const int64_t n = rows / 3;
  compress::DenseWeights w;
  FZ_ASSIGN_OR_RETURN(w.weight, fused.weight.Slice(part * n, (part + 1) * n));
  FZ_ASSIGN_OR_RETURN(w.bias, fused.bias.Slice(part * n, (part + 1) * n));
  return w;
}

StatusOr<compress::PredictorConfig> ReadConfig(const std::filesystem::path& path) {
  FZ_ASSIGN_OR_RETURN(const std::string text, model::ReadFileToString(path));
  FZ_ASSIGN_OR_RETURN(const Json root, model::ParseJson(text, path.string()));
  const JsonPath at{path.string(), ""};
  compress::PredictorConfig c;
  FZ_ASSIGN_OR_RETURN(const int64_t layer, model::RequiredInt(root, "sparse_layer", at));
  c.sparse_layer = static_cast<int>(layer);
  FZ_ASSIGN_OR_RETURN(c.vision_keep_rate,
                      model::DoubleOr(root, "vision_keep_rate", c.vision_keep_rate, at));
  FZ_ASSIGN_OR_RETURN(c.text_keep_rate,
                      model::DoubleOr(root, "output_text_keep_rate", c.text_keep_rate, at));
  FZ_ASSIGN_OR_RETURN(c.text_threshold,
                      model::DoubleOr(root, "output_text_threshold", c.text_threshold, at));
  FZ_ASSIGN_OR_RETURN(c.hidden, model::RequiredInt(root, "hidden_size", at));
  FZ_ASSIGN_OR_RETURN(c.width, model::RequiredInt(root, "predictor_width", at));
  // The head count is a training argument (tools/train/train_predictors.py --heads).
  const Json* training = model::FindField(root, "training");
  const Json* args = training != nullptr ? model::FindField(*training, "args") : nullptr;
  if (args == nullptr) {
    return InvalidArgumentError("{}: no training.args (the predictors' head count lives there)",
                                path.string());
  }
  FZ_ASSIGN_OR_RETURN(c.heads,
                      model::RequiredInt(*args, "heads", at.Child("training").Child("args")));
  if (c.vision_keep_rate <= 0 || c.vision_keep_rate > 1 || c.text_keep_rate <= 0 ||
      c.text_keep_rate > 1) {
    return InvalidArgumentError("{}: keep rates {} / {} outside (0, 1]", path.string(),
                                c.vision_keep_rate, c.text_keep_rate);
  }
  // A keep margin is a difference of two logits; the policy option takes the same range.
  if (!(std::abs(c.text_threshold) <= compress::kMaxTextThreshold)) {
    return InvalidArgumentError("{}: output_text_threshold {} outside [-{}, {}]", path.string(),
                                c.text_threshold, compress::kMaxTextThreshold,
                                compress::kMaxTextThreshold);
  }
  return c;
}

}  // namespace

StatusOr<std::shared_ptr<const compress::DynamicLlavaPredictors>> LoadDynamicLlavaPredictors(
    const std::filesystem::path& dir, int64_t decoder_hidden, Device device) {
  const std::filesystem::path weights_path = dir / kPredictorsFile;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(weights_path, ec)) {
    return NotFoundError("{} has no {} (tools/train/train_predictors.py trains them)", dir.string(),
                         kPredictorsFile);
  }
  FZ_ASSIGN_OR_RETURN(const compress::PredictorConfig config,
                      ReadConfig(dir / kPredictorsConfigFile));
  if (config.hidden != decoder_hidden) {
    return InvalidArgumentError("{}: predictors for hidden size {}, the decoder's is {}",
                                (dir / kPredictorsConfigFile).string(), config.hidden,
                                decoder_hidden);
  }
  FZ_ASSIGN_OR_RETURN(const model::SafetensorsFile file,
                      model::SafetensorsFile::Open(weights_path));
  const TensorReader r(file, device);

  compress::ImagePredictorWeights image;
  FZ_ASSIGN_OR_RETURN(image.in_norm, r.Norm("image_predictor.in_norm"));
  FZ_ASSIGN_OR_RETURN(image.in_proj, r.Dense("image_predictor.in_proj"));
  for (int b = 0; file.Find(fmt::format("image_predictor.blocks.{}.qkv.weight", b)) != nullptr;
       ++b) {
    const std::string p = fmt::format("image_predictor.blocks.{}.", b);
    compress::PredictorVitBlock blk;
    FZ_ASSIGN_OR_RETURN(blk.norm1, r.Norm(p + "norm1"));
    FZ_ASSIGN_OR_RETURN(blk.norm2, r.Norm(p + "norm2"));
    FZ_ASSIGN_OR_RETURN(const compress::DenseWeights qkv, r.Dense(p + "qkv"));
    FZ_ASSIGN_OR_RETURN(blk.q, ThirdOf(qkv, 0, p + "qkv"));
    FZ_ASSIGN_OR_RETURN(blk.k, ThirdOf(qkv, 1, p + "qkv"));
    FZ_ASSIGN_OR_RETURN(blk.v, ThirdOf(qkv, 2, p + "qkv"));
    FZ_ASSIGN_OR_RETURN(blk.proj, r.Dense(p + "proj"));
    FZ_ASSIGN_OR_RETURN(blk.fc1, r.Dense(p + "fc1"));
    FZ_ASSIGN_OR_RETURN(blk.fc2, r.Dense(p + "fc2"));
    image.blocks.push_back(std::move(blk));
  }
  FZ_ASSIGN_OR_RETURN(image.fc1, r.Dense("image_predictor.fc1"));
  FZ_ASSIGN_OR_RETURN(image.fc2, r.Dense("image_predictor.fc2"));
  FZ_ASSIGN_OR_RETURN(image.fc3, r.Dense("image_predictor.fc3"));

  compress::TextPredictorWeights text;
  FZ_ASSIGN_OR_RETURN(text.in_norm, r.Norm("text_predictor.in_norm"));
  FZ_ASSIGN_OR_RETURN(text.in_proj, r.Dense("text_predictor.in_proj"));
  FZ_ASSIGN_OR_RETURN(text.fc1, r.Dense("text_predictor.fc1"));
  FZ_ASSIGN_OR_RETURN(text.fc2, r.Dense("text_predictor.fc2"));
  FZ_ASSIGN_OR_RETURN(text.fc3, r.Dense("text_predictor.fc3"));
  return compress::DynamicLlavaPredictors::Create(config, std::move(image), std::move(text));
}

compress::PolicyResources LoadPolicyResources(const std::filesystem::path& dir,
                                              int64_t decoder_hidden, Device device) {
  compress::PolicyResources resources;
  auto predictors = LoadDynamicLlavaPredictors(dir, decoder_hidden, device);
  if (predictors.ok()) {
    resources.dynamic_llava = *std::move(predictors);
    resources.dynamic_llava_missing.clear();
  } else {
    resources.dynamic_llava_missing = std::string(predictors.status().message());
    if (!absl::IsNotFound(predictors.status())) {
      FZ_LOG_WARN("policy dynamic_llava unavailable: {}", resources.dynamic_llava_missing);
    }
  }
  return resources;
}

}  // namespace framezip::engine::runtime
