#include "tests/testing/compare.h"

#include <cmath>

#include "engine/core/half.h"

namespace framezip::testing {

Tolerance Tolerance::For(engine::DType dtype) {
  switch (dtype) {
    case engine::DType::kF16:
      return {1e-2, 0};
    case engine::DType::kBF16:
      return {4e-2, 0};
    default:
      return {1e-5, 0};
  }
}

std::vector<float> ToFloatVector(const engine::Tensor& t) {
  auto host = t.device().is_cpu() ? StatusOr<engine::Tensor>(t) : t.To(engine::Device::Cpu());
  FZ_CHECK(host.ok());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case engine::DType::kF32:
        out[i] = host->data<float>()[i];
        break;
      case engine::DType::kF16:
        out[i] = engine::F16ToF32(host->data<engine::Float16>()[i]);
        break;
      case engine::DType::kBF16:
        out[i] = engine::BF16ToF32(host->data<engine::BFloat16>()[i]);
        break;
      default:
        FZ_CHECK(false && "ToFloatVector: not a float tensor");
    }
  }
  return out;
}

CompareResult CompareValues(const std::vector<float>& got, const std::vector<double>& want,
                            Tolerance tol) {
  CompareResult r;
  if (got.size() != want.size()) {
    r.ok = false;
    r.message = fmt::format("size mismatch: got {} values, want {}", got.size(), want.size());
    return r;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double rel = err / std::max(std::fabs(want[i]), 1e-30);
    r.max_abs_error = std::max(r.max_abs_error, err);
    r.max_rel_error = std::max(r.max_rel_error, rel);
    if (!(err <= tol.abs + tol.rel * std::fabs(want[i])) && r.ok) {
      r.ok = false;
      r.message =
          fmt::format("value mismatch at index {}: got {}, want {} (|diff| {} > abs {} + rel {})",
                      i, got[i], want[i], err, tol.abs, tol.rel);
    }
  }
  return r;
}

CompareResult CompareTensors(const engine::Tensor& got, const engine::Tensor& want, Tolerance tol) {
  if (got.shape() != want.shape()) {
    return {false,
            fmt::format("shape mismatch: got {}, want {}", engine::ShapeString(got.shape()),
                        engine::ShapeString(want.shape())),
            0, 0};
  }
  const std::vector<float> w = ToFloatVector(want);
  return CompareValues(ToFloatVector(got), std::vector<double>(w.begin(), w.end()), tol);
}

}  // namespace framezip::testing
