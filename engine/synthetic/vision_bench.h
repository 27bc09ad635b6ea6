// Timing entry point for `framezip bench engine`: milliseconds per frame of the vision tower at
// a given shape, with random weights built in memory (no checkpoint).
//
// Default shape: SigLIP-so400m-patch14-384 as LLaVA-OneVision ships it (hidden 1152, 26 layers
// (so400m itself has 27), 16 heads, patch 14, image 384, intermediate 4304, gelu_pytorch_tanh,
// eps 1e-6), bf16 weights, f32 activations. The timed work is the tower only (embeddings + all
// layers, as for vision_feature_layer -1); projector and pooling are < 1% of it.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/core/dtype.h"
#include "engine/model/config.h"

namespace framezip::engine::vision {

// SigLIP-so400m vision config with `num_layers` layers (26 = OV, 27 = so400m).
model::VisionConfig SiglipSo400mConfig(int64_t num_layers = 26);

// A llava_onevision config around `vision` (text hidden 896 as the 0.5B, feature layer -1, "full").
model::LlavaConfig OnevisionConfigFor(const model::VisionConfig& vision, int64_t text_hidden = 896);

// Cost: one so400m frame is ~642 GFLOP, i.e. seconds per frame on a CPU (about 30 s per frame on
// a loaded 2-core machine, bf16 weights), plus a few seconds to build the random weights. Keep
// frames · (iterations + warmup) small.
struct VisionTimingOptions {
  DType weight_dtype = DType::kBF16;
  // The encoder layers' projections quantised to int8 at setup
  // (runtime::QuantizeVisionProjections), as --vision-weight-format int8 loads them.
  bool int8_projections = false;
  int64_t frames = 1;   // frames per timed call (one batch)
  int iterations = 1;   // timed calls
  bool warmup = false;  // one untimed call first (first-touch of the scratch buffers)
  uint64_t seed = 1;
};

struct VisionTiming {
  double ms_per_frame = 0;  // mean over the timed calls
  double min_ms_per_frame = 0;
  int64_t frames = 0;
  int iterations = 0;
  double setup_ms = 0;  // building the random weights, quantising and packing them (as a load does)
  double gflops_per_frame = 0;  // GEMM + attention FLOPs of one frame (for a throughput figure)
};

// Builds random weights for `vision` and times VisionTowerHiddenStates on random pixels.
StatusOr<VisionTiming> TimeVisionTower(const model::VisionConfig& vision,
                                       const VisionTimingOptions& options = {});

}  // namespace framezip::engine::vision
