#include "engine/compress/zipvl.h"

#include <algorithm>
#include <cmath>

#include "engine/compress/probe_scoring.h"
#include "engine/compress/top_p.h"

namespace framezip::engine::compress {
namespace {

kv::KvFormat BitsFormat(int bits, kv::KvFormat full) {
  switch (bits) {
    case 4:
      return kv::KvFormat::kInt4;
    case 2:
      return kv::KvFormat::kInt2;
    default:
      return full;
  }
}

// `t` (sorted ascending) joined with the last `recent` of n indices, still sorted and unique.
std::vector<int32_t> WithRecent(std::vector<int32_t> t, int64_t n, int64_t recent) {
  const int32_t first = static_cast<int32_t>(std::max<int64_t>(0, n - recent));
  while (!t.empty() && t.back() >= first) t.pop_back();
  for (int32_t i = first; i < n; ++i) t.push_back(i);
  return t;
}

}  // namespace

kv::KvPrecision ZipVlPolicy::Precision(kv::KvFormat full) const {
  return {full, BitsFormat(options_.high_bits, full), BitsFormat(options_.low_bits, full)};
}

Status ZipVlPolicy::OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) {
  PrefillLayerPlan plan;
  plan.classes = std::move(keep);
  FZ_RETURN_IF_ERROR(PlanPrefillLayer(inputs, plan));
  keep = std::move(plan.classes);
  return absl::OkStatus();
}

Status ZipVlPolicy::PlanPrefillLayer(const PrefillLayerInputs& in, PrefillLayerPlan& plan) {
  const int64_t n = in.q->dim(0);
  const std::vector<int32_t> probes =
      SelectProbes(n, options_.probes_recent, options_.probes_random, options_.seed + calls_++);
  FZ_ASSIGN_OR_RETURN(const ProbeScores scores,
                      ScoreProbes(*in.q, *in.k, probes, options_.per_head));
  const uint8_t rest = options_.low_bits == 0 ? kv::kDrop : kv::kRest;
  plan.classes.assign(static_cast<size_t>(n), rest);
  // The first dense_layers layers keep their selection (the KV classes) but attend densely.
  plan.sparse = in.layer >= options_.dense_layers;
  plan.u_rows = options_.u_rows;
  plan.u_window = options_.u_window;
  plan.u_sinks = options_.u_sinks;
  for (int g = 0; g < scores.groups; ++g) {
    const std::span<const float> a(scores.a.data() + g * n, static_cast<size_t>(n));
    const std::span<const float> a_norm(scores.a_norm.data() + g * n, static_cast<size_t>(n));
    std::vector<int32_t> t =
        WithRecent(TopIndices(a_norm, AdaptiveCount(a, options_.tau)), n, options_.keep_recent);
    // A page row holds every KV head of a token, so per-head sets are stored as their union.
    for (int32_t i : t) plan.classes[static_cast<size_t>(i)] = kv::kImportant;
    if (options_.per_head) {
      plan.important_per_kv_head.push_back(std::move(t));
    } else {
      plan.important = std::move(t);
    }
  }
  return absl::OkStatus();
}

Status ZipVlPolicy::ClassifyResidual(int /*layer*/, const Tensor& q_rows, const Tensor& k_rows,
                                     std::vector<uint8_t>& classes) {
  if (k_rows.rank() != 3 || k_rows.dim(1) <= 0 || k_rows.dim(2) <= 0 || q_rows.numel() == 0 ||
      q_rows.numel() % (k_rows.dim(1) * k_rows.dim(2)) != 0 || q_rows.dtype() != DType::kF32 ||
      k_rows.dtype() != DType::kF32) {
    return InvalidArgumentError("zipvl: a residual window of keys {} for a query {}",
                                ShapeString(k_rows.shape()), ShapeString(q_rows.shape()));
  }
  // The window is a few dozen tokens: classified on the host wherever it lives.
  Tensor q_host = q_rows, k_host = k_rows;
  if (!q_rows.device().is_cpu()) {
    FZ_ASSIGN_OR_RETURN(q_host, q_rows.To(Device::Cpu()));
    FZ_ASSIGN_OR_RETURN(k_host, k_rows.To(Device::Cpu()));
  }
  const float* q = q_host.data<float>();
  const float* k = k_host.data<float>();
  const int64_t n = k_rows.dim(0), kv_heads = k_rows.dim(1), d = k_rows.dim(2);
  const int64_t heads = q_rows.numel() / d, rep = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // One query sees the whole window: a_j = Σ_h softmax_h(q_h · k_j)_j, c_j = 1, so ã = a.
  const int64_t groups = options_.per_head ? kv_heads : 1;
  std::vector<float> a(static_cast<size_t>(groups * n), 0.f);
  std::vector<float> logits(static_cast<size_t>(n));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / rep;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      const float* kj = k + (j * kv_heads + g) * d;
      for (int64_t e = 0; e < d; ++e) s += q[h * d + e] * kj[e];
      logits[static_cast<size_t>(j)] = s * scale;
      mx = std::max(mx, logits[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (float& x : logits) {
      x = std::exp(x - mx);
      sum += x;
    }
    float* row = a.data() + (options_.per_head ? g : 0) * n;
    for (int64_t j = 0; j < n; ++j)
      row[j] += static_cast<float>(logits[static_cast<size_t>(j)] / sum);
  }
  classes.assign(static_cast<size_t>(n), options_.low_bits == 0 ? kv::kDrop : kv::kRest);
  for (int64_t g = 0; g < groups; ++g) {
    const std::span<const float> ag(a.data() + g * n, static_cast<size_t>(n));
    for (int32_t i : TopIndices(ag, AdaptiveCount(ag, options_.tau))) {
      classes[static_cast<size_t>(i)] = kv::kImportant;
    }
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::compress
