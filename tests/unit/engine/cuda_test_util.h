// Helpers for the [cuda] tests: skip (not fail) where no GPU is usable, move tensors to the GPU,
// and compare a GPU result with the CPU op's with a tolerance scaled to the output's magnitude.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "tests/testing/compare.h"

namespace framezip::engine::test {

// True, after printing why, when this machine has no usable GPU. The [cuda] tests return at once
// then; tests/unit/engine/CMakeLists.txt gives them SKIP_REGULAR_EXPRESSION on this line, so CTest
// reports them as skipped, never as passed. With a GPU the line is never printed.
inline bool SkipWithoutGpu() {
  if (CudaDeviceCount() > 0) return false;
  std::cout << "SKIPPED: no usable GPU (" << CudaUnavailableReason() << ")" << std::endl;
  return true;
}

// The message of a Status or StatusOr, for the report of a failed FZ_REQUIRE_OK.
inline std::string StatusText(const Status& status) { return status.ToString(); }
template <typename T>
std::string StatusText(const StatusOr<T>& result) {
  return result.status().ToString();
}

// REQUIRE(expr.ok()) that reports the error's message: a GPU run is rare, and a bare "false"
// would leave the cause to the next lease.
#define FZ_REQUIRE_OK(expr)                                           \
  do {                                                                \
    const auto& fz_require_ok_result = (expr);                        \
    INFO(::framezip::engine::test::StatusText(fz_require_ok_result)); \
    REQUIRE(fz_require_ok_result.ok());                               \
  } while (false)

inline Tensor OnGpu(const Tensor& host) {
  auto t = host.To(Device::Cuda(0));
  FZ_CHECK(t.ok());
  return *t;
}

// A GPU tensor filled with NaN, so an element the kernel never writes fails the comparison.
inline Tensor PoisonedGpu(Shape shape) {
  auto host = Tensor::Empty(shape, DType::kF32);
  FZ_CHECK(host.ok());
  std::fill_n(host->data<float>(), host->numel(), std::numeric_limits<float>::quiet_NaN());
  return OnGpu(*host);
}

inline double Rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0 : std::sqrt(s / static_cast<double>(v.size()));
}

// ‖got − want‖ / ‖want‖ over all elements (NaN propagates and fails any bound).
inline double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// Checks `got` (any device) against the CPU op's `want` element by element with `tol`.
inline void CheckClose(const Tensor& got, const Tensor& want, testing::Tolerance tol) {
  const auto r = testing::CompareTensors(got, want, tol);
  INFO(r.message);
  CHECK(r.ok);
}

// Tolerances relative to the CPU result's RMS, for outputs whose scale the data sets (sums over
// K, logits): every element within element·RMS, and ‖got − want‖ / ‖want‖ <= l2.
struct RmsTolerance {
  double element;
  double l2;
};

inline void CheckWithinRms(const Tensor& got, const Tensor& want, RmsTolerance tol) {
  const auto want_v = testing::ToFloatVector(want);
  const auto got_v = testing::ToFloatVector(got);
  const double rms = Rms(want_v);
  REQUIRE(rms > 0);
  CheckClose(got, want, {tol.element * rms, 0.0});
  const double l2 = RelativeL2(got_v, want_v);
  INFO("relative L2 error " << l2);
  CHECK(l2 <= tol.l2);
}

}  // namespace framezip::engine::test
