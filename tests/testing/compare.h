// Tensor comparison for tests: reports the first mismatching index with both values, so a failing
// kernel test says where and by how much (CTranslate2's expect_storage_eq).
#pragma once

#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace framezip::testing {

// Per-dtype tolerances (docs/DEVELOPING.md §5).
struct Tolerance {
  double abs = 1e-5;
  double rel = 0.0;
  static Tolerance For(engine::DType dtype);
};

struct CompareResult {
  bool ok = true;
  std::string message;  // empty when ok
  double max_abs_error = 0;
  double max_rel_error = 0;
};

// Compares element-wise after converting both to f32 on the host. |got - want| must be at most
// abs + rel * |want| everywhere.
CompareResult CompareTensors(const engine::Tensor& got, const engine::Tensor& want, Tolerance tol);
CompareResult CompareValues(const std::vector<float>& got, const std::vector<double>& want,
                            Tolerance tol);

// Host f32 copy of any float tensor.
std::vector<float> ToFloatVector(const engine::Tensor& t);

}  // namespace framezip::testing
