// ZipVL (docs/methods.md §1): layer-adaptive important-token selection with sparse prefill
// attention and a mixed-precision (v1) or evicting (v2) KV cache.
//
// Prefill, per layer and chunk: probes P (probe_scoring.h) score the chunk's tokens; the
// adaptive count p (top_p.h, τ) splits them into T (the p largest ã, stored kv::kImportant) and
// U (stored kv::kRest at low bits, or kv::kDrop with low_bits=evict). Attention runs sparse over
// Q[T], K[T], V[T]; U rows are skipped, attend to T, or attend to a local window (u_rows).
//
// Chunked prefill (the layer already stores `past` tokens): selection is local to the chunk —
// probes, scores and T are drawn from the chunk's own tokens (scores over the chunk's keys only),
// T rows attend to everything the layer stores from earlier chunks plus K[T] of this chunk, and
// U rows (attend mode) see the same past plus the T tokens before them. A one-chunk prefill is
// therefore exactly the paper's algorithm; smaller chunks make selection more local.
//
// Decode: ResidualWindow() tokens are kept at full precision, then ClassifyResidual applies Eq. 6
// and Eq. 7 to the window with the current decode query (c_j = 1 for a single query, so ã = a).
//
// The last `keep_recent` tokens of a chunk are always in T (on top of the p chosen): they hold the
// question and the generation prompt, and with u_rows=skip a U row gets no attention at all —
// the tiny video model's answers collapsed (42% -> 12% on synthvid) when the last token, whose
// logits are sampled, landed in U.
//
// Options: ZipVlOptions (policy_config.h), e.g. "zipvl:tau=0.9,u_rows=attend". With u_rows=local
// each U row attends to the u_window tokens ending at itself, all of them, plus the first u_sinks
// tokens (ops::LocalWindowAttention).
#pragma once

#include <memory>

#include "engine/compress/policy.h"

namespace framezip::engine::compress {

class ZipVlPolicy final : public CompressionPolicy {
 public:
  explicit ZipVlPolicy(ZipVlOptions options) : options_(options) {}

  std::string_view name() const override { return "zipvl"; }
  const ZipVlOptions& options() const { return options_; }

  kv::KvPrecision Precision(kv::KvFormat full) const override;
  Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) override;
  Status PlanPrefillLayer(const PrefillLayerInputs& inputs, PrefillLayerPlan& plan) override;
  bool OnDecodeWrite(int, int32_t) override { return true; }
  bool StoresEveryDecodeToken() const override { return true; }
  int ResidualWindow() const override { return options_.window; }
  // On any device: the probe scores are computed where q and k are (ops::ProbeScoresCuda on a
  // GPU) and only they come to the host for the top-p split; a residual window (a few dozen
  // tokens) is classified on the host.
  bool RunsOn(Device) const override { return true; }
  Status ClassifyResidual(int layer, const Tensor& q, const Tensor& k,
                          std::vector<uint8_t>& classes) override;

 private:
  ZipVlOptions options_;
  uint64_t calls_ = 0;  // advances the probe seed so chunks and layers draw different probes
};

}  // namespace framezip::engine::compress
