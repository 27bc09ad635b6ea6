#include "tests/unit/engine/vision/vision_reference.h"

#include <algorithm>
#include <cmath>

#include "engine/core/half.h"
#include "fmt/format.h"
#include "tests/testing/compare.h"

namespace framezip::testing {
namespace {

using engine::DType;
using engine::model::Activation;

std::vector<double> Get(const WeightMap& w, const std::string& name) {
  auto it = w.find(name);
  FZ_CHECK(it != w.end());
  const auto f = ToFloatVector(it->second);
  return std::vector<double>(f.begin(), f.end());
}

// y[M, N] = x[M, K] · W[N, K]ᵀ + b
std::vector<double> Linear(const std::vector<double>& x, int64_t M, int64_t K,
                           const std::vector<double>& W, const std::vector<double>& b, int64_t N) {
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b.empty() ? 0.0 : b[n];
      for (int64_t k = 0; k < K; ++k) s += x[m * K + k] * W[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

std::vector<double> LayerNorm(const std::vector<double>& x, int64_t M, int64_t D,
                              const std::vector<double>& g, const std::vector<double>& b,
                              double eps) {
  std::vector<double> y(x.size());
  for (int64_t m = 0; m < M; ++m) {
    double mean = 0, var = 0;
    for (int64_t d = 0; d < D; ++d) mean += x[m * D + d];
    mean /= D;
    for (int64_t d = 0; d < D; ++d) var += (x[m * D + d] - mean) * (x[m * D + d] - mean);
    var /= D;
    for (int64_t d = 0; d < D; ++d)
      y[m * D + d] = (x[m * D + d] - mean) / std::sqrt(var + eps) * g[d] + b[d];
  }
  return y;
}

// Each row of x [M, K] as the int8 Linear sees it: codes round_half_even(x · 127 / max|row|)
// times max|row| / 127.
std::vector<double> Int8PerRow(std::vector<double> x, int64_t M, int64_t K) {
  for (int64_t m = 0; m < M; ++m) {
    double largest = 0;
    for (int64_t k = 0; k < K; ++k) largest = std::max(largest, std::fabs(x[m * K + k]));
    for (int64_t k = 0; k < K; ++k) {
      double& v = x[m * K + k];
      v = largest == 0 ? 0 : std::nearbyint(v * 127 / largest) * (largest / 127);
    }
  }
  return x;
}

double Act(Activation a, double x) {
  switch (a) {
    case Activation::kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::kQuickGelu:
      return x / (1 + std::exp(-1.702 * x));
    default:
      FZ_CHECK(false && "activation not used by vision towers");
  }
  return 0;
}

double RoundTo(DType t, double x) {
  const float f = static_cast<float>(x);
  if (t == DType::kBF16) return engine::BF16ToF32(engine::F32ToBF16(f));
  if (t == DType::kF16) return engine::F16ToF32(engine::F32ToF16(f));
  return f;
}

}  // namespace

std::vector<std::vector<double>> ReferenceHiddenStates(const engine::model::VisionConfig& c,
                                                       const WeightMap& w,
                                                       const std::vector<float>& pixels, int64_t N,
                                                       EncoderInputs inputs) {
  const std::string p = "model.vision_tower.vision_model.";
  const int64_t C = c.num_channels, S = c.image_size, P = c.patch_size, G = S / P;
  const int64_t D = c.hidden_size, T = c.num_positions(), I = c.intermediate_size;
  const int64_t heads = c.num_attention_heads, hd = D / heads;
  const bool clip = c.has_class_embedding();
  const DType wdtype = w.at(p + "embeddings.patch_embedding.weight").dtype();
  const auto conv = Get(w, p + "embeddings.patch_embedding.weight");  // [D, C, P, P]
  const auto conv_b =
      clip ? std::vector<double>(D, 0.0) : Get(w, p + "embeddings.patch_embedding.bias");
  const auto pos = Get(w, p + "embeddings.position_embedding.weight");
  std::vector<double> x(static_cast<size_t>(N * T * D));
  for (int64_t n = 0; n < N; ++n) {
    if (clip) {
      const auto cls = Get(w, p + "embeddings.class_embedding");
      for (int64_t d = 0; d < D; ++d) x[(n * T) * D + d] = cls[d] + pos[d];
    }
    for (int64_t gy = 0; gy < G; ++gy)
      for (int64_t gx = 0; gx < G; ++gx) {
        const int64_t t = gy * G + gx + (clip ? 1 : 0);
        for (int64_t d = 0; d < D; ++d) {
          double s = conv_b[d];
          for (int64_t ch = 0; ch < C; ++ch)
            for (int64_t ky = 0; ky < P; ++ky)
              for (int64_t kx = 0; kx < P; ++kx)
                s += conv[((d * C + ch) * P + ky) * P + kx] *
                     RoundTo(wdtype, pixels[((n * C + ch) * S + gy * P + ky) * S + gx * P + kx]);
          x[(n * T + t) * D + d] = s + pos[t * D + d];
        }
      }
  }
  if (c.has_pre_layernorm()) {
    x = LayerNorm(x, N * T, D, Get(w, p + "pre_layrnorm.weight"), Get(w, p + "pre_layrnorm.bias"),
                  c.layer_norm_eps);
  }
  std::vector<std::vector<double>> hs = {x};
  // An encoder projection's input, as the configured Linear reads it.
  const auto in = [inputs](const std::vector<double>& v, int64_t rows, int64_t width) {
    return inputs == EncoderInputs::kInt8PerRow ? Int8PerRow(v, rows, width) : v;
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string q = fmt::format("{}encoder.layers.{}.", p, l);
    auto G1 = [&](const std::string& s) { return Get(w, q + s); };
    const auto h =
        LayerNorm(x, N * T, D, G1("layer_norm1.weight"), G1("layer_norm1.bias"), c.layer_norm_eps);
    const auto hq = in(h, N * T, D);
    const auto Q =
        Linear(hq, N * T, D, G1("self_attn.q_proj.weight"), G1("self_attn.q_proj.bias"), D);
    const auto K =
        Linear(hq, N * T, D, G1("self_attn.k_proj.weight"), G1("self_attn.k_proj.bias"), D);
    const auto V =
        Linear(hq, N * T, D, G1("self_attn.v_proj.weight"), G1("self_attn.v_proj.bias"), D);
    std::vector<double> a(x.size(), 0.0), s(static_cast<size_t>(T));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t hh = 0; hh < heads; ++hh)
        for (int64_t i = 0; i < T; ++i) {
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < T; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < hd; ++e)
              dot += Q[(n * T + i) * D + hh * hd + e] * K[(n * T + j) * D + hh * hd + e];
            s[j] = dot / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, s[j]);
          }
          for (int64_t j = 0; j < T; ++j) sum += (s[j] = std::exp(s[j] - mx));
          for (int64_t j = 0; j < T; ++j)
            for (int64_t e = 0; e < hd; ++e)
              a[(n * T + i) * D + hh * hd + e] += s[j] / sum * V[(n * T + j) * D + hh * hd + e];
        }
    const auto o = Linear(in(a, N * T, D), N * T, D, G1("self_attn.out_proj.weight"),
                          G1("self_attn.out_proj.bias"), D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const auto h2 =
        LayerNorm(x, N * T, D, G1("layer_norm2.weight"), G1("layer_norm2.bias"), c.layer_norm_eps);
    auto f = Linear(in(h2, N * T, D), N * T, D, G1("mlp.fc1.weight"), G1("mlp.fc1.bias"), I);
    for (double& v : f) v = Act(c.hidden_act, v);
    const auto o2 = Linear(in(f, N * T, I), N * T, I, G1("mlp.fc2.weight"), G1("mlp.fc2.bias"), D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o2[i];
    hs.push_back(x);
  }
  return hs;
}

std::vector<double> ReferenceFeatures(const engine::model::LlavaConfig& config, const WeightMap& w,
                                      const std::vector<float>& pixels, int64_t N) {
  const auto hs = ReferenceHiddenStates(config.vision, w, pixels, N);
  const int64_t L = config.vision.num_hidden_layers, T = config.vision.num_positions();
  const int64_t D = config.vision.hidden_size;
  const int64_t skip =
      config.vision_feature_select_strategy == engine::model::FeatureSelect::kDefault ? 1 : 0;
  const int64_t nL = static_cast<int64_t>(config.vision_feature_layers.size());
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = skip; t < T; ++t)
      for (int64_t layer : config.vision_feature_layers) {
        const auto& h = hs[layer < 0 ? layer + L + 1 : layer];
        out.insert(out.end(), h.begin() + (n * T + t) * D, h.begin() + (n * T + t + 1) * D);
      }
  FZ_CHECK_EQ(static_cast<int64_t>(out.size()), N * (T - skip) * D * nL);
  return out;
}

std::vector<double> ReferenceProject(const engine::model::LlavaConfig& config, const WeightMap& w,
                                     const std::vector<double>& x) {
  const int64_t in = config.projector_input_dim(), H = config.text.hidden_size;
  const int64_t M = static_cast<int64_t>(x.size()) / in;
  const std::string q = "model.multi_modal_projector.";
  const auto b1 = config.projector_bias ? Get(w, q + "linear_1.bias") : std::vector<double>();
  const auto b2 = config.projector_bias ? Get(w, q + "linear_2.bias") : std::vector<double>();
  auto h = Linear(x, M, in, Get(w, q + "linear_1.weight"), b1, H);
  for (double& v : h) v = Act(config.projector_hidden_act, v);
  return Linear(h, M, H, Get(w, q + "linear_2.weight"), b2, H);
}

std::vector<double> ReferenceVideo(const engine::model::LlavaConfig& config, const WeightMap& w,
                                   const std::vector<float>& frames, int64_t F) {
  const auto proj = ReferenceProject(config, w, ReferenceFeatures(config, w, frames, F));
  const int64_t G = config.vision.patches_per_side(), p = (G + 1) / 2, H = config.text.hidden_size;
  // PyTorch's bilinear taps (float source coordinate, as the rule specifies), blend in f64.
  auto taps = [&](int64_t d, int64_t& i0, int64_t& i1, double& w1) {
    const float scale = static_cast<float>(G) / static_cast<float>(p);
    const double src = std::max(scale * (static_cast<float>(d) + 0.5f) - 0.5f, 0.0f);
    i0 = std::min(static_cast<int64_t>(std::floor(src)), G - 1);
    i1 = i0 < G - 1 ? i0 + 1 : i0;
    w1 = src - static_cast<double>(i0);
  };
  std::vector<double> out;
  for (int64_t f = 0; f < F; ++f)
    for (int64_t y = 0; y < p; ++y)
      for (int64_t x = 0; x < p; ++x) {
        int64_t y0, y1, x0, x1;
        double wy, wx;
        taps(y, y0, y1, wy);
        taps(x, x0, x1, wx);
        for (int64_t h = 0; h < H; ++h) {
          auto at = [&](int64_t r, int64_t c) { return proj[((f * G + r) * G + c) * H + h]; };
          out.push_back((1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) +
                        wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1)));
        }
      }
  const auto nl = Get(w, "model.image_newline");
  out.insert(out.end(), nl.begin(), nl.end());
  return out;
}

}  // namespace framezip::testing
