#include "engine/synthetic/random_vision_weights.h"

#include <cmath>

#include "engine/core/half.h"
#include "engine/core/thread_pool.h"
#include "fmt/format.h"

namespace framezip::engine::vision {
namespace {

// Counter-based splitmix64: element i of a tensor is Mix(stream + i·odd), so values do not depend
// on how the fill is split over threads, and filling the 400M values of SigLIP-so400m takes
// seconds (std::normal_distribution would take tens of seconds).
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T, typename Convert>
void FillTyped(T* out, int64_t n, uint64_t stream, float mean, float half_width, Convert convert) {
  ComputePool().ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t r = Mix(stream + static_cast<uint64_t>(i) * 0xd1b54a32d192ed03ull);
      const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      out[i] = convert(mean + (2.0f * u - 1.0f) * half_width);
    }
  });
}

// Fills t with mean + uniform noise of standard deviation `stddev` (half-width stddev·√3); each
// tensor gets its own stream, drawn from `state`.
void Fill(Tensor& t, uint64_t& state, float mean, float stddev) {
  const float half_width = stddev * std::sqrt(3.0f);
  const uint64_t stream = Mix(state++);
  switch (t.dtype()) {
    case DType::kF32:
      FillTyped(t.data<float>(), t.numel(), stream, mean, half_width, [](float v) { return v; });
      break;
    case DType::kBF16:
      FillTyped(t.data<BFloat16>(), t.numel(), stream, mean, half_width, F32ToBF16);
      break;
    case DType::kF16:
      FillTyped(t.data<Float16>(), t.numel(), stream, mean, half_width, F32ToF16);
      break;
    default:
      break;  // rejected by RandomVisionCheckpoint
  }
}

}  // namespace

StatusOr<std::map<std::string, Tensor>> RandomVisionCheckpoint(const model::LlavaConfig& config,
                                                               DType dtype, uint64_t seed,
                                                               float stddev) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgumentError("random vision weights: dtype {} is not f32, f16 or bf16",
                                DTypeName(dtype));
  }
  const model::VisionConfig& v = config.vision;
  const int64_t D = v.hidden_size, I = v.intermediate_size, C = v.num_channels, P = v.patch_size;
  const int64_t H = config.text.hidden_size;
  std::map<std::string, Tensor> m;
  uint64_t state = seed;
  // kind: 'w' weight (stddev), 'b' bias (small), 'g' LayerNorm gamma (1 + small).
  auto add = [&](const std::string& name, Shape shape, char kind) -> Status {
    FZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(shape), dtype));
    const float mean = kind == 'g' ? 1.0f : 0.0f;
    const float sd = kind == 'w' ? stddev : 0.1f * stddev + (kind == 'g' ? 0.05f : 0.0f);
    Fill(t, state, mean, sd);
    m[name] = t;
    return absl::OkStatus();
  };
  const std::string p = kVisionTowerPrefix;
  FZ_RETURN_IF_ERROR(add(p + "embeddings.patch_embedding.weight", {D, C, P, P}, 'w'));
  if (v.patch_embedding_bias()) {
    FZ_RETURN_IF_ERROR(add(p + "embeddings.patch_embedding.bias", {D}, 'b'));
  }
  if (v.has_class_embedding()) FZ_RETURN_IF_ERROR(add(p + "embeddings.class_embedding", {D}, 'w'));
  FZ_RETURN_IF_ERROR(add(p + "embeddings.position_embedding.weight", {v.num_positions(), D}, 'w'));
  if (v.has_pre_layernorm()) {
    FZ_RETURN_IF_ERROR(add(p + "pre_layrnorm.weight", {D}, 'g'));
    FZ_RETURN_IF_ERROR(add(p + "pre_layrnorm.bias", {D}, 'b'));
  }
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const std::string q = fmt::format("{}encoder.layers.{}.", p, l);
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      FZ_RETURN_IF_ERROR(add(q + ln + ".weight", {D}, 'g'));
      FZ_RETURN_IF_ERROR(add(q + ln + ".bias", {D}, 'b'));
    }
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      FZ_RETURN_IF_ERROR(add(q + "self_attn." + proj + ".weight", {D, D}, 'w'));
      FZ_RETURN_IF_ERROR(add(q + "self_attn." + proj + ".bias", {D}, 'b'));
    }
    FZ_RETURN_IF_ERROR(add(q + "mlp.fc1.weight", {I, D}, 'w'));
    FZ_RETURN_IF_ERROR(add(q + "mlp.fc1.bias", {I}, 'b'));
    FZ_RETURN_IF_ERROR(add(q + "mlp.fc2.weight", {D, I}, 'w'));
    FZ_RETURN_IF_ERROR(add(q + "mlp.fc2.bias", {D}, 'b'));
  }
  const std::string r = "model.multi_modal_projector.";
  FZ_RETURN_IF_ERROR(add(r + "linear_1.weight", {H, config.projector_input_dim()}, 'w'));
  FZ_RETURN_IF_ERROR(add(r + "linear_2.weight", {H, H}, 'w'));
  if (config.projector_bias) {
    FZ_RETURN_IF_ERROR(add(r + "linear_1.bias", {H}, 'b'));
    FZ_RETURN_IF_ERROR(add(r + "linear_2.bias", {H}, 'b'));
  }
  if (config.has_image_newline) FZ_RETURN_IF_ERROR(add("model.image_newline", {H}, 'w'));
  return m;
}

WeightLookup MapLookup(const std::map<std::string, Tensor>& tensors) {
  return [&tensors](const std::string& name) -> StatusOr<Tensor> {
    auto it = tensors.find(name);
    if (it == tensors.end()) return NotFoundError("weight {} is not in the checkpoint", name);
    return it->second;
  };
}

StatusOr<LlavaVisionWeights> RandomLlavaVisionWeights(const model::LlavaConfig& config, DType dtype,
                                                      uint64_t seed, float stddev) {
  FZ_ASSIGN_OR_RETURN(auto tensors, RandomVisionCheckpoint(config, dtype, seed, stddev));
  // The bound tensors share the map's buffers, so they stay valid after the map goes away.
  return BindLlavaVisionWeights(config, MapLookup(tensors));
}

}  // namespace framezip::engine::vision
