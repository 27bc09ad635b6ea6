// KIVI baseline (docs/methods.md §4.2): uniform low-bit KV, no sparsity. Every prefill token is
// kImportant, stored in int2 ("kivi", default) or int4 ("kivi4") pages: keys per channel over
// each 32-token page, values per token in 32-channel groups. Decode tokens stay full precision in
// a residual window of `window` tokens (128); when a layer holds that many, all of them are
// requantised (kImportant) — KIVI's R.
//
// Options: KiviOptions (policy_config.h): bits (2 or 4; "kivi4" is kivi with bits=4), window.
#pragma once

#include <memory>

#include "engine/compress/policy.h"

namespace framezip::engine::compress {

class KiviPolicy final : public CompressionPolicy {
 public:
  explicit KiviPolicy(KiviOptions options) : options_(options) {}

  std::string_view name() const override { return options_.bits == 4 ? "kivi4" : "kivi"; }
  // Every class is fixed (kImportant) without reading an activation: a GPU decoder need not copy
  // them to the host for it.
  bool RunsOn(Device) const override { return true; }
  kv::KvPrecision Precision(kv::KvFormat full) const override;
  Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) override;
  bool OnDecodeWrite(int, int32_t) override { return true; }
  bool StoresEveryDecodeToken() const override { return true; }
  int ResidualWindow() const override { return options_.window; }

 private:
  KiviOptions options_;
};

}  // namespace framezip::engine::compress
