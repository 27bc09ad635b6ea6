#include "engine/kv/kv_format.h"

namespace framezip::engine::kv {

std::vector<KvFormat> StorableFormats() {
  return {KvFormat::kF32, KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2};
}

StatusOr<KvFormat> ParseKvFormat(std::string_view name) {
  if (name == "f32") return KvFormat::kF32;
  if (name == "f16") return KvFormat::kF16;
  return InvalidArgumentError("unknown KV format '{}' (want f32 or f16)", name);
}

StatusOr<DType> KvFormatDType(KvFormat f) {
  switch (f) {
    case KvFormat::kF32:
      return DType::kF32;
    case KvFormat::kF16:
      return DType::kF16;
    case KvFormat::kInt4:
    case KvFormat::kInt2:
    case KvFormat::kLowRank:
      return UnimplementedError("KV format {} is not implemented yet", KvFormatName(f));
  }
  return InternalError("bad KV format tag {}", static_cast<int>(f));
}

}  // namespace framezip::engine::kv
