// Stand-alone timing of the vision tower at the SigLIP-so400m shape with random weights, until
// `framezip bench engine` calls TimeVisionTower itself:
//   build/tests/vision_tower_bench [frames=1] [iterations=1] [layers=26] [dtype=bf16|f32|f16|int8]
// (int8: bf16 weights whose encoder projections are quantised as --vision-weight-format int8 does)
//   build/tests/vision_tower_bench ops     (one layer's ops timed one by one, 1 frame)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "engine/core/thread_pool.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/linear.h"
#include "engine/synthetic/random_vision_weights.h"
#include "engine/synthetic/vision_bench.h"

namespace {

using namespace framezip::engine;

double TimeMs(const std::function<framezip::Status()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  const framezip::Status s = fn();
  if (!s.ok()) std::fprintf(stderr, "op failed: %s\n", std::string(s.message()).c_str());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int TimeOps() {
  const auto v = vision::SiglipSo400mConfig(1);
  const auto config = vision::OnevisionConfigFor(v, 64);
  auto w = vision::RandomLlavaVisionWeights(config, DType::kBF16, 1);
  if (!w.ok()) return 1;
  const auto& l = w->tower.layers[0];
  const int64_t T = 729, D = 1152, I = 4304;
  auto x = Tensor::Zeros({T, D}, DType::kF32);
  auto y = Tensor::Zeros({T, D}, DType::kF32);
  auto m = Tensor::Zeros({T, I}, DType::kF32);
  auto q = Tensor::Zeros({1, T, 16, 72}, DType::kF32);
  auto o = Tensor::Zeros({1, T, 16, 72}, DType::kF32);
  for (int rep = 0; rep < 2; ++rep) {
    std::printf("layernorm %.1f ms\n",
                TimeMs([&] { return ops::LayerNorm(*x, l.ln1_weight, l.ln1_bias, 1e-6f, *y); }));
    std::printf("q_proj    %.1f ms (x4 per layer)\n",
                TimeMs([&] { return ops::Linear(*x, l.q_weight, l.q_bias, *y); }));
    std::printf("attention %.1f ms\n",
                TimeMs([&] { return ops::BidirectionalAttention(*q, *q, *q, *o, 0); }));
    std::printf("fc1       %.1f ms\n",
                TimeMs([&] { return ops::Linear(*x, l.fc1_weight, l.fc1_bias, *m); }));
    std::printf("gelu_tanh %.1f ms\n",
                TimeMs([&] { return ops::Gelu(*m, ops::GeluApproximation::kTanh, *m); }));
    std::printf("fc2       %.1f ms\n",
                TimeMs([&] { return ops::Linear(*m, l.fc2_weight, l.fc2_bias, *y); }));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "ops") return TimeOps();
  vision::VisionTimingOptions options;
  options.frames = argc > 1 ? std::atoll(argv[1]) : 1;
  options.iterations = argc > 2 ? std::atoi(argv[2]) : 1;
  const int64_t layers = argc > 3 ? std::atoll(argv[3]) : 26;
  const std::string dtype = argc > 4 ? argv[4] : "bf16";
  options.weight_dtype = dtype == "f32" ? DType::kF32 : dtype == "f16" ? DType::kF16 : DType::kBF16;
  options.int8_projections = dtype == "int8";
  const auto config = vision::SiglipSo400mConfig(layers);
  auto r = vision::TimeVisionTower(config, options);
  if (!r.ok()) {
    std::fprintf(stderr, "vision bench: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::printf(
      "siglip-so400m layers=%lld dtype=%s threads=%d frames=%lld iterations=%d: %.1f ms/frame "
      "(best %.1f), %.1f GFLOP/frame, %.1f GFLOP/s, setup %.0f ms\n",
      static_cast<long long>(layers), dtype.c_str(), ComputeThreads(),
      static_cast<long long>(r->frames), r->iterations, r->ms_per_frame, r->min_ms_per_frame,
      r->gflops_per_frame, r->gflops_per_frame / (r->min_ms_per_frame / 1e3), r->setup_ms);
  return 0;
}
