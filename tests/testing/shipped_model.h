// What the engine tests on the shipped model (models/framezip-tiny-video) share: one Engine per
// test binary (loading it takes most of a test's time), a deterministic synthetic video turn,
// and an elementwise difference of logits.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {

inline engine::runtime::Engine& ShippedEngine() {
  static std::unique_ptr<engine::runtime::Engine> engine = [] {
    engine::SetComputeThreads(2);
    auto e = engine::runtime::Engine::Load(SourceDir() / "models/framezip-tiny-video");
    if (!e.ok()) FAIL("loading the shipped model: " << MessageOf(e.status()));
    return *std::move(e);
  }();
  return *engine;
}

// A user turn of `frames` frames of deterministic pseudo-random pixels (side `size`) and `text`.
inline engine::runtime::Message SyntheticVideoMessage(int64_t frames, int64_t size,
                                                      std::string text, uint32_t salt = 0) {
  engine::runtime::VisualInput video;
  video.pixels = *engine::Tensor::Zeros({frames, 3, size, size}, engine::DType::kF32);
  float* p = video.pixels.data<float>();
  for (int64_t i = 0; i < video.pixels.numel(); ++i) {
    p[i] = static_cast<float>(((i + salt) * 2654435761u) % 1000) / 500.f - 1.f;
  }
  return engine::runtime::Message{"user", std::move(text), {video}};
}

// max |a - b| over two f32 host tensors of one size.
inline double MaxAbsDiff(const engine::Tensor& a, const engine::Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max<double>(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  }
  return m;
}

}  // namespace framezip::testing
