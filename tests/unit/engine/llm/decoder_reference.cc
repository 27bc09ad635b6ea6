#include "tests/unit/engine/llm/decoder_reference.h"

#include <algorithm>
#include <cmath>

#include "engine/core/half.h"
#include "tests/testing/compare.h"

namespace framezip::engine::llm::reference {
namespace {

std::vector<double> F64(const Tensor& t) {
  const auto f = testing::ToFloatVector(t);
  return std::vector<double>(f.begin(), f.end());
}

std::vector<double> RefRmsNorm(const std::vector<double>& x, int64_t t, const Tensor& w,
                               double eps) {
  const auto wv = F64(w);
  const int64_t d = static_cast<int64_t>(wv.size());
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < t; ++i) {
    double ms = 0;
    for (int64_t e = 0; e < d; ++e) ms += x[i * d + e] * x[i * d + e];
    const double inv = 1 / std::sqrt(ms / d + eps);
    for (int64_t e = 0; e < d; ++e) y[i * d + e] = x[i * d + e] * inv * wv[e];
  }
  return y;
}

// Half-split RoPE of rows at positions first, first + 1, ... in exact f64 angles.
void RefRope(std::vector<double>& x, int64_t first, int64_t t, int64_t heads, int64_t d,
             double theta) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < d / 2; ++e) {
        const double ang = static_cast<double>(first + i) / std::pow(theta, 2.0 * e / d);
        double& a = x[(i * heads + h) * d + e];
        double& b = x[(i * heads + h) * d + e + d / 2];
        const double na = a * std::cos(ang) - b * std::sin(ang);
        const double nb = b * std::cos(ang) + a * std::sin(ang);
        a = na;
        b = nb;
      }
}

std::vector<double> RoundedToF16(std::vector<double> x) {
  for (double& v : x) v = F16ToF32(F32ToF16(static_cast<float>(v)));
  return x;
}

}  // namespace

ReferenceShape ReferenceShapeOf(const model::TextConfig& c) {
  return {.hidden = c.hidden_size,
          .heads = c.num_attention_heads,
          .kv_heads = c.num_key_value_heads,
          .head_dim = c.head_dim,
          .rms_eps = c.rms_norm_eps,
          .rope_theta = c.rope_theta};
}

ReferenceShape ReferenceShapeOf(const DecoderShape& s) {
  return {.hidden = s.hidden,
          .heads = s.heads,
          .kv_heads = s.kv_heads,
          .head_dim = s.head_dim,
          .rms_eps = s.rms_eps,
          .rope_theta = s.rope.theta};
}

std::vector<double> RefLinear(std::vector<double> x, int64_t t, const Tensor& w, const Tensor& b,
                              bool bf16_inputs, const Tensor& scale) {
  const int64_t n = w.dim(0), k = w.dim(1);
  if (bf16_inputs && w.dtype() == DType::kBF16) {
    for (double& v : x) v = BF16ToF32(F32ToBF16(static_cast<float>(v)));
  }
  std::vector<double> wv;
  if (w.dtype() == DType::kI8) {
    wv.resize(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) {
        wv[j * k + kk] = static_cast<double>(w.data<int8_t>()[j * k + kk]) * scale.data<float>()[j];
      }
    }
    for (int64_t i = 0; i < t; ++i) {
      double max = 0;
      for (int64_t kk = 0; kk < k; ++kk) max = std::max(max, std::abs(x[i * k + kk]));
      const double step = max / 127;
      for (int64_t kk = 0; kk < k; ++kk) {
        x[i * k + kk] = max > 0 ? std::nearbyint(x[i * k + kk] / step) * step : 0.0;
      }
    }
  } else {
    wv = F64(w);
  }
  const auto bv = b.defined() ? F64(b) : std::vector<double>(n, 0.0);
  std::vector<double> y(static_cast<size_t>(t * n));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv[j];
      for (int64_t kk = 0; kk < k; ++kk) s += x[i * k + kk] * wv[j * k + kk];
      y[i * n + j] = s;
    }
  return y;
}

ReferenceDecoder::ReferenceDecoder(const ReferenceShape& shape, const DecoderWeights& weights,
                                   ReferenceOptions options)
    : shape_(shape),
      weights_(weights),
      options_(options),
      keys_(weights.layers.size()),
      values_(weights.layers.size()) {}

std::vector<double> ReferenceDecoder::Prefill(std::span<const int32_t> ids) {
  return Forward(ids, false);
}

std::vector<double> ReferenceDecoder::Decode(int32_t id) {
  return Forward(std::span<const int32_t>(&id, 1), true);
}

std::vector<double> ReferenceDecoder::Forward(std::span<const int32_t> ids,
                                              bool attend_own_rows_as_stored) {
  const ReferenceShape& c = shape_;
  const DecoderWeights& w = weights_;
  const bool bf16 = options_.bf16_linear_inputs;
  const int64_t t = static_cast<int64_t>(ids.size()), hid = c.hidden, nh = c.heads, g = c.kv_heads,
                d = c.head_dim, past = length_;
  const auto emb = F64(w.embed_tokens);
  std::vector<double> x(static_cast<size_t>(t * hid));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t e = 0; e < hid; ++e) x[i * hid + e] = emb[ids[i] * hid + e];
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    auto h = RefRmsNorm(x, t, L.input_layernorm, c.rms_eps);
    auto q = RefLinear(h, t, L.q_proj, L.q_bias, bf16, L.q_scale);
    auto k = RefLinear(h, t, L.k_proj, L.k_bias, bf16, L.k_scale);
    auto v = RefLinear(h, t, L.v_proj, L.v_bias, bf16, L.v_scale);
    RefRope(q, past, t, nh, d, c.rope_theta);
    RefRope(k, past, t, g, d, c.rope_theta);
    // The key sequence: the cache as stored, then this step's rows (as stored, or as computed).
    const std::vector<double> k_stored = options_.f16_kv ? RoundedToF16(k) : k;
    const std::vector<double> v_stored = options_.f16_kv ? RoundedToF16(v) : v;
    std::vector<double> keys = keys_[l], values = values_[l];
    const std::vector<double>& k_own = attend_own_rows_as_stored ? k_stored : k;
    const std::vector<double>& v_own = attend_own_rows_as_stored ? v_stored : v;
    keys.insert(keys.end(), k_own.begin(), k_own.end());
    values.insert(values.end(), v_own.begin(), v_own.end());
    keys_[l].insert(keys_[l].end(), k_stored.begin(), k_stored.end());
    values_[l].insert(values_[l].end(), v_stored.begin(), v_stored.end());

    std::vector<double> attn(static_cast<size_t>(t * nh * d), 0.0);
    for (int64_t hh = 0; hh < nh; ++hh) {
      const int64_t gg = hh / (nh / g);
      for (int64_t i = 0; i < t; ++i) {
        const int64_t seen = past + i + 1;  // causal: the past and rows up to this one
        std::vector<double> s(static_cast<size_t>(seen));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[(i * nh + hh) * d + e] * keys[(j * g + gg) * d + e];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        for (auto& sv : s) sum += (sv = std::exp(sv - mx));
        for (int64_t j = 0; j < seen; ++j)
          for (int64_t e = 0; e < d; ++e)
            attn[(i * nh + hh) * d + e] += s[j] / sum * values[(j * g + gg) * d + e];
      }
    }
    const auto o = RefLinear(attn, t, L.o_proj, L.o_bias, bf16, L.o_scale);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = RefRmsNorm(x, t, L.post_attention_layernorm, c.rms_eps);
    auto gate = RefLinear(h, t, L.gate_proj, L.gate_bias, bf16, L.gate_scale);
    const auto up = RefLinear(h, t, L.up_proj, L.up_bias, bf16, L.up_scale);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    const auto down = RefLinear(gate, t, L.down_proj, L.down_bias, bf16, L.down_scale);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  length_ += t;
  const auto n = RefRmsNorm(x, t, w.norm, c.rms_eps);
  return RefLinear(n, t, w.lm_head, Tensor(), bf16, w.lm_head_scale);
}

std::vector<double> RefForward(const model::TextConfig& c, const DecoderWeights& w,
                               const std::vector<int32_t>& ids, bool bf16_linear_inputs) {
  ReferenceDecoder reference(ReferenceShapeOf(c), w, {.bf16_linear_inputs = bf16_linear_inputs});
  return reference.Prefill(ids);
}

}  // namespace framezip::engine::llm::reference
