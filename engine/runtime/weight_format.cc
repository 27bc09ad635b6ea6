#include "engine/runtime/weight_format.h"

#include <tuple>
#include <utility>

#include "engine/ops/linear.h"
#include "engine/ops/quantize_int8.h"

namespace framezip::engine::runtime {

std::string_view WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kBf16:
      return "bf16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kFp8:
      return "fp8";
  }
  return "?";
}

StatusOr<WeightFormat> ParseWeightFormat(std::string_view name) {
  for (const WeightFormat f : {WeightFormat::kBf16, WeightFormat::kInt8, WeightFormat::kFp8}) {
    if (name == WeightFormatName(f)) return f;
  }
  return InvalidArgumentError("weight format '{}': want bf16, int8 or fp8", name);
}

Status CheckWeightFormat(WeightFormat format, Device device) {
  switch (format) {
    case WeightFormat::kBf16:
      return absl::OkStatus();
    case WeightFormat::kInt8:
      if (device.is_cpu()) return absl::OkStatus();
      return UnimplementedError(
          "weight format int8 runs on the CPU only; use bf16 on {}, or fp8 on an sm_90 GPU",
          DeviceName(device));
    case WeightFormat::kFp8:
      if (!device.is_cpu()) return absl::OkStatus();
      return UnimplementedError(
          "weight format fp8 (E4M3 weights through cuBLASLt) runs on sm_90 GPUs; the CPU has no "
          "FP8 arithmetic: use int8 or bf16 on it");
  }
  return InternalError("unknown weight format");
}

WeightFormat EffectiveWeightFormat(WeightFormat format, Device device) {
  if (format == WeightFormat::kFp8 && !ops::Fp8LinearAvailable(device)) return WeightFormat::kBf16;
  return format;
}

Status QuantizeVisionProjections(vision::VisionTowerWeights& tower) {
  for (vision::EncoderLayerWeights& l : tower.layers) {
    for (const auto& [proj, scale] : {std::pair{&l.q_weight, &l.q_scale},
                                      {&l.k_weight, &l.k_scale},
                                      {&l.v_weight, &l.v_scale},
                                      {&l.out_weight, &l.out_scale},
                                      {&l.fc1_weight, &l.fc1_scale},
                                      {&l.fc2_weight, &l.fc2_scale}}) {
      FZ_RETURN_IF_ERROR(ops::QuantizeWeightInt8InPlace(*proj, *scale));
    }
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::runtime
