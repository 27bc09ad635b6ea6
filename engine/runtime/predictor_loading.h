// Dynamic-LLaVA's predictors from a model directory: predictors.safetensors (the modules of
// tools/train/train_predictors.py, tensor for tensor) and predictors_config.json (how they were
// trained: sparse layer, keep rates, widths).
#pragma once

#include <filesystem>
#include <memory>

#include "common/status.h"
#include "engine/compress/dynamic_llava_predictors.h"
#include "engine/compress/policy.h"
#include "engine/core/device.h"

namespace framezip::engine::runtime {

inline constexpr const char* kPredictorsFile = "predictors.safetensors";
inline constexpr const char* kPredictorsConfigFile = "predictors_config.json";

// The predictors of `dir`, their weights on `device`. NOT_FOUND when the directory has no
// predictors.safetensors; INVALID_ARGUMENT naming the file and field or tensor when the config
// or a tensor is malformed, or the predictors were trained for another hidden size than
// `decoder_hidden`.
StatusOr<std::shared_ptr<const compress::DynamicLlavaPredictors>> LoadDynamicLlavaPredictors(
    const std::filesystem::path& dir, int64_t decoder_hidden, Device device = Device::Cpu());

// The policy resources of a model directory: its predictors when it has usable ones; otherwise
// the reason, which a policy that needs them reports (so a model without predictors still serves
// every other policy).
compress::PolicyResources LoadPolicyResources(const std::filesystem::path& dir,
                                              int64_t decoder_hidden, Device device);

}  // namespace framezip::engine::runtime
