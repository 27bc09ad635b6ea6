#include "engine/compress/kivi.h"

#include <algorithm>

namespace framezip::engine::compress {
kv::KvPrecision KiviPolicy::Precision(kv::KvFormat full) const {
  const kv::KvFormat q = options_.bits == 4 ? kv::KvFormat::kInt4 : kv::KvFormat::kInt2;
  return {full, q, q};
}

Status KiviPolicy::OnPrefillLayer(const PrefillLayerInputs&, std::vector<uint8_t>& keep) {
  std::fill(keep.begin(), keep.end(), kv::kImportant);
  return absl::OkStatus();
}

}  // namespace framezip::engine::compress
