// The per-channel pieces of a compressed-tensors checkpoint (stored_quantization.h), read while
// weights are bound: the scales beside a quantised Linear's weight, and FP8 weights decoded to
// bf16 with them.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/safetensors.h"

namespace framezip::engine::model {

// Where a quantised weight's scale tensor is, and whether one scale for the whole tensor may
// stand for all of its `channels` output channels.
struct StoredScale {
  std::string name;         // canonical, for messages: "<linear>.weight_scale"
  std::string stored_name;  // its key in `files`
  int64_t channels = 0;
  bool per_tensor_allowed = false;
};

// The scales as an owned f32 [channels] tensor: stored [N, 1] or [N] (or [1] / [] where allowed,
// broadcast), in f32, f16 or bf16; each finite and >= 0. INVALID_ARGUMENT naming the tensor and
// file otherwise.
StatusOr<Tensor> ReadChannelScales(const StoredScale& scale, const SafetensorsModel& files);

// A zero point stored beside a symmetric weight must be all zeros: UNIMPLEMENTED otherwise (the
// weights would be asymmetric).
Status CheckZeroPointIsZero(std::string_view name, const Tensor& zero_point);

// FP8 E4M3 weight `q` [N, K] times its channel scales [N], as an owned bf16 [N, K] tensor. Each
// element is the bf16 rounding of the exact product, which is what transformers' bf16
// decompression (q.to(bf16) * scale) gives. A NaN code (S.1111.111, which no quantiser writes) is
// INVALID_ARGUMENT naming `name` and its row: a damaged file, not weights to run.
StatusOr<Tensor> DecodeFp8Weight(std::string_view name, const Tensor& q, const Tensor& scales);

}  // namespace framezip::engine::model
