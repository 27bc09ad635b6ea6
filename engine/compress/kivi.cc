#include "engine/compress/kivi.h"

#include <algorithm>

namespace framezip::engine::compress {
namespace {

StatusOr<std::unique_ptr<CompressionPolicy>> CreateKivi(PolicyOptions& o, int default_bits) {
  KiviOptions k;
  FZ_ASSIGN_OR_RETURN(const int bits_choice, o.Choice("bits", {default_bits == 4 ? "4" : "2",
                                                               default_bits == 4 ? "2" : "4"}));
  k.bits = bits_choice == 0 ? default_bits : 6 - default_bits;
  FZ_ASSIGN_OR_RETURN(const int64_t window, o.Int("window", k.window, 1, 1 << 20));
  k.window = static_cast<int>(window);
  FZ_RETURN_IF_ERROR(o.CheckAllUsed());
  return std::unique_ptr<CompressionPolicy>(new KiviPolicy(k));
}

}  // namespace

kv::KvPrecision KiviPolicy::Precision(kv::KvFormat full) const {
  const kv::KvFormat q = options_.bits == 4 ? kv::KvFormat::kInt4 : kv::KvFormat::kInt2;
  return {full, q, q};
}

Status KiviPolicy::OnPrefillLayer(const PrefillLayerInputs&, std::vector<uint8_t>& keep) {
  std::fill(keep.begin(), keep.end(), kv::kImportant);
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<CompressionPolicy>> CreateKiviPolicy(PolicyOptions& options) {
  return CreateKivi(options, 2);
}

StatusOr<std::unique_ptr<CompressionPolicy>> CreateKivi4Policy(PolicyOptions& options) {
  return CreateKivi(options, 4);
}

}  // namespace framezip::engine::compress
