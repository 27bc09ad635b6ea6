#include "engine/vision/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/device_memory.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/cast.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/linear.h"
#include "engine/ops/patch_unfold.h"
#include "engine/ops/row_slices.h"
#include "engine/vision/activation.h"
#include "engine/vision/tensor_util.h"

namespace framezip::engine::vision {
namespace {

// Activation buffers of one batch of B images with T positions, reused by every layer.
struct Scratch {
  Tensor x;              // [B·T, D] residual stream
  Tensor h;              // [B·T, D] normed input / projection output
  Tensor q, k, v, attn;  // [B·T, D] (viewed [B, T, heads, head_dim] for attention)
  Tensor mlp;            // [B·T, I]
};

StatusOr<Scratch> NewScratch(int64_t rows, int64_t D, int64_t I, Device device) {
  Scratch s;
  FZ_ASSIGN_OR_RETURN(s.x, NewF32({rows, D}, "tower hidden states", device));
  FZ_ASSIGN_OR_RETURN(s.h, NewF32({rows, D}, "tower hidden states", device));
  FZ_ASSIGN_OR_RETURN(s.q, NewF32({rows, D}, "attention q", device));
  FZ_ASSIGN_OR_RETURN(s.k, NewF32({rows, D}, "attention k", device));
  FZ_ASSIGN_OR_RETURN(s.v, NewF32({rows, D}, "attention v", device));
  FZ_ASSIGN_OR_RETURN(s.attn, NewF32({rows, D}, "attention output", device));
  FZ_ASSIGN_OR_RETURN(s.mlp, NewF32({rows, I}, "mlp activations", device));
  return s;
}

// The tower runs where its weights are.
Device TowerDevice(const VisionTowerWeights& w) { return w.patch_weight.device(); }

// An f32 copy of a weight table on its own device (position and class embeddings).
StatusOr<Tensor> F32Copy(const Tensor& t, const char* what) {
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32(t.shape(), what, t.device()));
  FZ_RETURN_IF_ERROR(ops::Cast(t, out));
  return out;
}

// The embedding tables as f32, made once per call and shared by its batches.
struct EmbeddingTables {
  Tensor position;  // [T, D]
  Tensor cls;       // [D] (CLIP) or undefined
};

StatusOr<EmbeddingTables> F32Tables(const model::VisionConfig& c, const VisionTowerWeights& w) {
  EmbeddingTables t;
  FZ_ASSIGN_OR_RETURN(t.position, F32Copy(w.position_embedding, "position embedding"));
  if (c.has_class_embedding()) {
    FZ_ASSIGN_OR_RETURN(t.cls, F32Copy(w.class_embedding, "class embedding"));
  }
  return t;
}

// Patch embedding + class token + position embedding (+ CLIP's pre_layrnorm) into s.x. On a GPU
// the frames' pixels are sent as they are and unfolded there (ops::UnfoldPatches), so the host
// only copies.
Status Embed(const model::VisionConfig& c, const VisionTowerWeights& w,
             const EmbeddingTables& tables, const Tensor& pixels, int64_t first, int64_t B,
             Scratch& s) {
  const int64_t C = c.num_channels, S = c.image_size, P = c.patch_size, G = S / P;
  const int64_t D = c.hidden_size, T = c.num_positions(), K = C * P * P;
  const Device device = TowerDevice(w);
  FZ_ASSIGN_OR_RETURN(Tensor images, pixels.Slice(first, first + B));
  if (images.device() != device) {
    FZ_ASSIGN_OR_RETURN(images, images.To(device));
  }
  // Rows (b, gy, gx), columns (ch, ky, kx): the conv weight [D, C, P, P] read as [D, K].
  FZ_ASSIGN_OR_RETURN(Tensor cols, NewF32({B * G * G, K}, "unfolded patches", device));
  // Rounded as the patch GEMM would round them (16-bit weights take 16-bit inputs).
  const DType wdtype = w.patch_weight.dtype();
  const DType round_to = wdtype == DType::kBF16 || wdtype == DType::kF16 ? wdtype : DType::kF32;
  FZ_RETURN_IF_ERROR(ops::UnfoldPatches(images, P, round_to, cols));
  FZ_ASSIGN_OR_RETURN(Tensor patches, NewF32({B * G * G, D}, "patch embeddings", device));
  FZ_RETURN_IF_ERROR(ops::Linear(cols, w.patch_weight, w.patch_bias, patches));

  // x[b] = [cls;] patches[b], then x[b] += position embedding, image by image.
  float* x = static_cast<float*>(s.x.raw_data());
  if (c.has_class_embedding()) {
    std::vector<int32_t> cls_rows, patch_rows;
    for (int64_t b = 0; b < B; ++b) {
      cls_rows.push_back(static_cast<int32_t>(b * T));
      for (int64_t p = 0; p < G * G; ++p) patch_rows.push_back(static_cast<int32_t>(b * T + 1 + p));
    }
    const std::vector<int32_t> same_row(static_cast<size_t>(B), 0);
    FZ_RETURN_IF_ERROR(ops::CopyRowSlices(
        device, B, D,
        {.data = static_cast<const float*>(tables.cls.raw_data()), .stride = D, .rows = same_row},
        {.data = x, .stride = D, .rows = cls_rows}));
    FZ_RETURN_IF_ERROR(ops::CopyRowSlices(
        device, B * G * G, D, {.data = static_cast<const float*>(patches.raw_data()), .stride = D},
        {.data = x, .stride = D, .rows = patch_rows}));
  } else {
    FZ_RETURN_IF_ERROR(CopyBytes(x, device, patches.raw_data(), device, patches.nbytes()));
  }
  for (int64_t b = 0; b < B; ++b) {
    FZ_ASSIGN_OR_RETURN(Tensor image, s.x.Slice(b * T, (b + 1) * T));
    FZ_RETURN_IF_ERROR(ops::Add(image, tables.position, image));
  }
  if (c.has_pre_layernorm()) {
    FZ_RETURN_IF_ERROR(ops::LayerNorm(s.x, w.pre_ln_weight, w.pre_ln_bias,
                                      static_cast<float>(c.layer_norm_eps), s.x));
  }
  return absl::OkStatus();
}

Status EncoderLayer(const model::VisionConfig& c, const EncoderLayerWeights& w, int64_t B,
                    Scratch& s) {
  const int64_t T = c.num_positions(), D = c.hidden_size;
  const int64_t heads = c.num_attention_heads, hd = D / heads;
  const float eps = static_cast<float>(c.layer_norm_eps);
  // Attention block.
  FZ_RETURN_IF_ERROR(ops::LayerNorm(s.x, w.ln1_weight, w.ln1_bias, eps, s.h));
  FZ_RETURN_IF_ERROR(ops::Linear(s.h, w.q_weight, w.q_scale, w.q_bias, s.q));
  FZ_RETURN_IF_ERROR(ops::Linear(s.h, w.k_weight, w.k_scale, w.k_bias, s.k));
  FZ_RETURN_IF_ERROR(ops::Linear(s.h, w.v_weight, w.v_scale, w.v_bias, s.v));
  FZ_ASSIGN_OR_RETURN(Tensor q4, s.q.Reshape({B, T, heads, hd}));
  FZ_ASSIGN_OR_RETURN(Tensor k4, s.k.Reshape({B, T, heads, hd}));
  FZ_ASSIGN_OR_RETURN(Tensor v4, s.v.Reshape({B, T, heads, hd}));
  FZ_ASSIGN_OR_RETURN(Tensor a4, s.attn.Reshape({B, T, heads, hd}));
  // With 16-bit weights the activations already carry bf16-level error, so a GPU may attend on
  // bf16 tensor cores (ops::AttentionParams); the CPU ignores the flag.
  const ops::AttentionParams attention{
      .scale = static_cast<float>(1.0 / std::sqrt(hd)),
      .causal = false,
      .allow_bf16_tensor_cores = w.q_weight.dtype() != DType::kF32};
  FZ_RETURN_IF_ERROR(ops::Attention(q4, k4, v4, attention, a4));
  FZ_RETURN_IF_ERROR(ops::Linear(s.attn, w.out_weight, w.out_scale, w.out_bias, s.h));
  FZ_RETURN_IF_ERROR(ops::Add(s.x, s.h, s.x));
  // MLP block.
  FZ_RETURN_IF_ERROR(ops::LayerNorm(s.x, w.ln2_weight, w.ln2_bias, eps, s.h));
  FZ_RETURN_IF_ERROR(ops::Linear(s.h, w.fc1_weight, w.fc1_scale, w.fc1_bias, s.mlp));
  FZ_RETURN_IF_ERROR(ApplyActivation(c.hidden_act, s.mlp));
  FZ_RETURN_IF_ERROR(ops::Linear(s.mlp, w.fc2_weight, w.fc2_scale, w.fc2_bias, s.h));
  return ops::Add(s.x, s.h, s.x);
}

Status CheckPixels(const model::VisionConfig& c, const Tensor& pixels) {
  const Shape want = {pixels.rank() == 4 ? pixels.dim(0) : -1, c.num_channels, c.image_size,
                      c.image_size};
  if (pixels.rank() != 4 || pixels.shape() != want || pixels.dim(0) < 1) {
    return InvalidArgumentError(
        "vision tower: pixel_values has shape {}, expected [N >= 1, {}, {}, {}]",
        ShapeString(pixels.shape()), c.num_channels, c.image_size, c.image_size);
  }
  if (pixels.dtype() != DType::kF32 || !pixels.device().is_cpu()) {
    return InvalidArgumentError("vision tower: pixel_values must be f32 on the CPU, not {} on {}",
                                DTypeName(pixels.dtype()), DeviceName(pixels.device()));
  }
  if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
    return InvalidArgumentError("vision_config: hidden_size {} is not a multiple of {} heads",
                                c.hidden_size, c.num_attention_heads);
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::vector<Tensor>> VisionTowerHiddenStates(const model::VisionConfig& config,
                                                      const VisionTowerWeights& weights,
                                                      const Tensor& pixels,
                                                      const std::vector<int64_t>& layers,
                                                      const VisionRunOptions& options) {
  FZ_RETURN_IF_ERROR(CheckPixels(config, pixels));
  const int64_t bound = static_cast<int64_t>(weights.layers.size());
  int64_t deepest = 0;
  for (int64_t l : layers) {
    if (l < 0 || l > bound) {
      return InvalidArgumentError(
          "vision tower: hidden_states[{}] requested, but {} layers are bound (valid 0..{})", l,
          bound, bound);
    }
    deepest = std::max(deepest, l);
  }
  const int64_t N = pixels.dim(0), T = config.num_positions(), D = config.hidden_size;
  std::vector<Tensor> out(layers.size());
  for (Tensor& t : out) {
    FZ_ASSIGN_OR_RETURN(t, NewF32({N, T, D}, "hidden states"));
  }

  const int64_t chunk = std::max<int64_t>(1, options.max_images_per_batch);
  const Device device = TowerDevice(weights);
  FZ_ASSIGN_OR_RETURN(Scratch s,
                      NewScratch(std::min(chunk, N) * T, D, config.intermediate_size, device));
  FZ_ASSIGN_OR_RETURN(const EmbeddingTables tables, F32Tables(config, weights));
  for (int64_t first = 0; first < N; first += chunk) {
    const int64_t B = std::min(chunk, N - first);
    Scratch view = s;  // same buffers, shapes cut to this batch
    for (Tensor* t : {&view.x, &view.h, &view.q, &view.k, &view.v, &view.attn, &view.mlp}) {
      FZ_ASSIGN_OR_RETURN(*t, t->Slice(0, B * T));
    }
    auto keep = [&](int64_t index) -> Status {
      for (size_t i = 0; i < layers.size(); ++i) {
        if (layers[i] != index) continue;
        FZ_RETURN_IF_ERROR(CopyBytes(out[i].data<float>() + first * T * D, Device::Cpu(),
                                     view.x.raw_data(), device,
                                     static_cast<size_t>(B * T * D) * sizeof(float)));
      }
      return absl::OkStatus();
    };
    FZ_RETURN_IF_ERROR(Embed(config, weights, tables, pixels, first, B, view));
    FZ_RETURN_IF_ERROR(keep(0));
    for (int64_t l = 0; l < deepest; ++l) {
      FZ_RETURN_IF_ERROR(EncoderLayer(config, weights.layers[l], B, view));
      FZ_RETURN_IF_ERROR(keep(l + 1));
    }
  }
  return out;
}

int64_t SelectedTokensPerImage(const model::LlavaConfig& config) {
  return config.vision.num_positions() -
         (config.vision_feature_select_strategy == model::FeatureSelect::kDefault ? 1 : 0);
}

StatusOr<Tensor> VisionTowerFeatures(const model::LlavaConfig& config,
                                     const VisionTowerWeights& weights, const Tensor& pixels,
                                     const VisionRunOptions& options) {
  const int64_t L = config.vision.num_hidden_layers;
  std::vector<int64_t> layers;
  for (int64_t l : config.vision_feature_layers) {
    if (l < -(L + 1) || l > L) {
      return InvalidArgumentError(
          "config.json: vision_feature_layer {} is out of range for {} layers", l, L);
    }
    layers.push_back(l < 0 ? l + L + 1 : l);
  }
  FZ_ASSIGN_OR_RETURN(std::vector<Tensor> hs,
                      VisionTowerHiddenStates(config.vision, weights, pixels, layers, options));
  const int64_t N = pixels.dim(0), T = config.vision.num_positions(), D = config.vision.hidden_size;
  const int64_t skip = T - SelectedTokensPerImage(config);  // 1 drops CLS ("default")
  const int64_t Ts = T - skip, nL = static_cast<int64_t>(hs.size());
  if (nL == 1 && skip == 0) return hs[0];
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32({N, Ts, D * nL}, "vision features"));
  float* dst = out.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < Ts; ++t) {
      for (int64_t l = 0; l < nL; ++l) {
        std::memcpy(dst + ((n * Ts + t) * nL + l) * D, hs[l].data<float>() + (n * T + t + skip) * D,
                    static_cast<size_t>(D) * sizeof(float));
      }
    }
  }
  return out;
}

StatusOr<VisionTowerWeights> VisionTowerWeightsOn(const VisionTowerWeights& weights,
                                                  Device device) {
  auto on = [&](const Tensor& t) -> StatusOr<Tensor> {
    if (!t.defined()) return Tensor();
    StatusOr<Tensor> copy = t.To(device);
    if (!copy.ok()) {
      return Annotate(copy.status(),
                      fmt::format("vision tower: copying weights to {}", DeviceName(device)));
    }
    return copy;
  };
  if (!weights.layers.empty() && weights.layers[0].q_scale.defined()) {
    return UnimplementedError("vision tower: int8 weights run on the CPU only (not on {})",
                              DeviceName(device));
  }
  VisionTowerWeights out = weights;
  for (Tensor* t : TowerEmbeddingTensors(out)) {
    FZ_ASSIGN_OR_RETURN(*t, on(*t));
  }
  for (EncoderLayerWeights& l : out.layers) {
    for (Tensor* t : EncoderLayerTensors(l)) {
      FZ_ASSIGN_OR_RETURN(*t, on(*t));
    }
  }
  return out;
}

}  // namespace framezip::engine::vision
