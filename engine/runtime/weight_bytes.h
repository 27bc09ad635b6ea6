// The memory a loaded model's weights take where they are served: what a memory budget
// (EngineOptions::memory_budget_bytes) counts before it gives the rest to the KV pool.
//
// Counted as the tensors the decoder and the vision path hold after loading (quantised weights
// at their 8-bit size plus their scales; a tied LM head once, as the embedding it is). On a GPU
// those are the device copies; on the CPU they include the checkpoint's memory-mapped tensors
// that are served as stored. Packing caches filled at first use (the CPU's AMX tiles) are not
// weights of the model and are not counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "engine/llm/decoder_shape.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::runtime {

size_t HeldWeightBytes(const llm::DecoderWeights& decoder,
                       const vision::LlavaVisionWeights& vision);

// What a memory budget leaves the KV pool once the weights are loaded: budget − weight_bytes.
// RESOURCE_EXHAUSTED naming the sizes (and `weight_format`, the way to shrink the weights) when
// that is less than one KV page of page_bytes; INVALID_ARGUMENT for a budget or page size <= 0.
StatusOr<int64_t> KvBudgetLeftByWeights(int64_t memory_budget_bytes, size_t weight_bytes,
                                        size_t page_bytes, std::string_view weight_format);

}  // namespace framezip::engine::runtime
