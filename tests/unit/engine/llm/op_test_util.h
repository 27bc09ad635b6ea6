// Helpers for the engine/llm and engine/ops tests: random tensors of any float dtype together with
// the exact f32 values they hold (so f64 references see the same rounded weights).
#pragma once

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "tests/testing/compare.h"
#include "tests/testing/random.h"

namespace framezip::engine::test {

struct RandomTensor {
  Tensor tensor;
  std::vector<double> values;  // what the tensor holds, element by element, as f64
};

inline RandomTensor MakeRandom(Shape shape, DType dtype, std::mt19937_64& rng, float stddev = 1.f) {
  auto t = Tensor::Empty(shape, dtype);
  FZ_CHECK(t.ok());
  const auto v = testing::RandomNormal(static_cast<size_t>(NumElements(shape)), rng, stddev);
  RandomTensor r{*t, std::vector<double>(v.size())};
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::kBF16: {
        const BFloat16 b = F32ToBF16(v[i]);
        r.tensor.data<BFloat16>()[i] = b;
        r.values[i] = BF16ToF32(b);
        break;
      }
      case DType::kF16: {
        const Float16 h = F32ToF16(v[i]);
        r.tensor.data<Float16>()[i] = h;
        r.values[i] = F16ToF32(h);
        break;
      }
      default:
        r.tensor.data<float>()[i] = v[i];
        r.values[i] = v[i];
        break;
    }
  }
  return r;
}

inline Tensor MakeEmpty(Shape shape, DType dtype = DType::kF32) {
  auto t = Tensor::Empty(shape, dtype);
  FZ_CHECK(t.ok());
  return *t;
}

inline Tensor MakeF32(const std::vector<float>& v, Shape shape) {
  Tensor t = MakeEmpty(std::move(shape));
  FZ_CHECK(t.numel() == static_cast<int64_t>(v.size()));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

inline Tensor MakeI32(const std::vector<int32_t>& v) {
  Tensor t = MakeEmpty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// Requires got ≈ want with |got − want| <= abs + rel·|want| everywhere; prints the first miss.
inline void RequireClose(const Tensor& got, const std::vector<double>& want, double abs,
                         double rel = 0) {
  const auto r =
      testing::CompareValues(testing::ToFloatVector(got), want, testing::Tolerance{abs, rel});
  INFO(r.message);
  INFO("max abs error " << r.max_abs_error << ", max rel error " << r.max_rel_error);
  REQUIRE(r.ok);
}

}  // namespace framezip::engine::test
