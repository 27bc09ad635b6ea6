// End-to-end section of `framezip bench gpu`: the Qwen2-0.5B text model (hidden 896, 24 layers,
// 14/2 heads of 64, intermediate 4864, vocabulary 151936, tied head) with random bf16 weights,
// run whole on the GPU by the serving decoder (llm::Decoder, policy none, f32 KV pages on the
// device): prefill tokens/s of one long prompt, decode
// tokens/s at batch 1 and 16 (each step: forward pass + greedy pick on the device, ids back), and
// batch-1 decode's weight bytes per second against the copy ceiling (decode is a pass over all
// weights per step). Also the vision tower of the same model family (VisionEndToEnd).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace framezip::benchgpu {

// Whether `s` is OK; if not, prints "framezip bench gpu: <section> <what> failed: <message>" (a
// section's rows are then left out, the others still run).
bool SectionStepOk(const Status& s, const char* section, const char* what);

struct E2eRow {
  std::string name;
  double value;
  std::string unit;
};

// `copy_gbps`: the device copy ceiling measured first. quick: 1k-token prompts and fewer steps.
// On a failure, prints what failed and returns an empty list.
std::vector<E2eRow> ModelEndToEnd(double copy_gbps, bool quick);

// LLaVA-OneVision's vision tower (SigLIP-so400m, 26 layers, 729 tokens per 384-px frame) with
// random bf16 weights on the GPU (vision::VisionTowerWeightsOn): frames/s of host pixels to the
// last hidden state back on the host. quick: 8 frames instead of 32. Empty on a failure.
std::vector<E2eRow> VisionEndToEnd(bool quick);

}  // namespace framezip::benchgpu
