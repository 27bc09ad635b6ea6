#include "engine/compress/dynamic_llava.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace framezip::engine::compress {
namespace {

// Rows of a [n, 2] f32 logits tensor (on any device) on the host.
StatusOr<std::vector<float>> HostLogits(const Tensor& logits) {
  Tensor host = logits;
  if (!logits.device().is_cpu()) {
    FZ_ASSIGN_OR_RETURN(host, logits.To(Device::Cpu()));
  }
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

// Indices of the `k` largest scores, in ascending index order (ties: the earlier row first).
std::vector<int64_t> TopKInOrder(const std::vector<float>& score, int64_t k) {
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

DynamicLlavaPolicy::DynamicLlavaPolicy(DynamicLlavaOptions options,
                                       std::shared_ptr<const DynamicLlavaPredictors> predictors)
    : options_(options), predictors_(std::move(predictors)), rng_(options.seed) {}

kv::KvPrecision DynamicLlavaPolicy::Precision(kv::KvFormat full) const {
  if (options_.bits == 16) return {full, full, full};
  const kv::KvFormat q = options_.bits == 4 ? kv::KvFormat::kInt4 : kv::KvFormat::kInt2;
  return {full, q, q};
}

Status DynamicLlavaPolicy::OnPrefillLayer(const PrefillLayerInputs&, std::vector<uint8_t>& keep) {
  // What reaches a layer is kept; with bits 4/2 it is stored quantised (KIVI's prefill).
  if (options_.bits != 16) std::fill(keep.begin(), keep.end(), kv::kImportant);
  return absl::OkStatus();
}

bool DynamicLlavaPolicy::OnDecodeWrite(int layer, int32_t) {
  return layer < *options_.sparse_layer || decode_keep_;
}

StatusOr<std::vector<float>> DynamicLlavaPolicy::ScoreBlock(const Tensor& hidden, int64_t r0,
                                                            int64_t r1) {
  const size_t n = static_cast<size_t>(r1 - r0);
  std::vector<float> score(n);
  if (options_.random_select) {
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    for (float& s : score) s = uniform(rng_);
    return score;
  }
  FZ_ASSIGN_OR_RETURN(const Tensor rows, hidden.Slice(r0, r1));
  FZ_ASSIGN_OR_RETURN(const Tensor logits, predictors_->ImageLogits(rows));
  FZ_ASSIGN_OR_RETURN(const std::vector<float> l, HostLogits(logits));
  for (size_t i = 0; i < n; ++i) score[i] = l[2 * i] - l[2 * i + 1];
  return score;
}

Status DynamicLlavaPolicy::SelectPrefillRows(const HiddenRowsInputs& in,
                                             std::vector<uint8_t>& keep) {
  if (in.visual == nullptr) return absl::OkStatus();
  const int64_t t = in.hidden->dim(0);
  for (int64_t r0 = 0; r0 < t;) {
    if (!in.visual[r0]) {
      ++r0;
      continue;
    }
    int64_t r1 = r0;
    while (r1 < t && in.visual[r1]) ++r1;
    const int64_t n = r1 - r0;
    const int64_t k = std::clamp<int64_t>(
        static_cast<int64_t>(std::floor(static_cast<double>(n) * *options_.vision_keep)), 1, n);
    if (k < n) {
      FZ_ASSIGN_OR_RETURN(const std::vector<float> score, ScoreBlock(*in.hidden, r0, r1));
      std::fill(keep.begin() + r0, keep.begin() + r1, uint8_t{0});
      for (const int64_t i : TopKInOrder(score, k)) keep[static_cast<size_t>(r0 + i)] = 1;
    }
    r0 = r1;
  }
  return absl::OkStatus();
}

Status DynamicLlavaPolicy::OnDecodeHidden(const Tensor& hidden, int32_t) {
  ++decode_seen_;
  if (!options_.text_gate) {
    decode_keep_ = true;
  } else if (options_.text_keep > 0) {
    // Token n (1-based) is kept when floor(n · rate) steps up: exactly that fraction, spread
    // evenly.
    const auto kept_after = [&](int64_t n) {
      return static_cast<int64_t>(std::floor(static_cast<double>(n) * options_.text_keep + 1e-9));
    };
    decode_keep_ = kept_after(decode_seen_) > kept_after(decode_seen_ - 1);
  } else {
    FZ_ASSIGN_OR_RETURN(const Tensor logits, predictors_->TextLogits(hidden));
    FZ_ASSIGN_OR_RETURN(const std::vector<float> l, HostLogits(logits));
    decode_keep_ = static_cast<double>(l[0]) - static_cast<double>(l[1]) > *options_.text_threshold;
  }
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<CompressionPolicy>> CreateDynamicLlavaPolicy(
    DynamicLlavaOptions d, const PolicyResources& resources) {
  if (resources.dynamic_llava == nullptr) {
    return FailedPreconditionError("policy dynamic_llava needs the model's predictors: {}",
                                   resources.dynamic_llava_missing);
  }
  const PredictorConfig& trained = resources.dynamic_llava->config();
  if (!d.sparse_layer) d.sparse_layer = trained.sparse_layer;
  if (!d.vision_keep) d.vision_keep = trained.vision_keep_rate;
  if (!d.text_threshold) d.text_threshold = trained.text_threshold;
  return std::unique_ptr<CompressionPolicy>(new DynamicLlavaPolicy(d, resources.dynamic_llava));
}

}  // namespace framezip::engine::compress
