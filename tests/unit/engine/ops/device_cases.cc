#include "tests/unit/engine/ops/device_cases.h"

#include <cmath>
#include <iostream>
#include <limits>

#include "engine/core/half.h"

namespace framezip::engine::test {

std::vector<Device> DevicesPresent() {
  std::vector<Device> devices = {Device::Cpu()};
  if (CudaDeviceCount() > 0) devices.push_back(Device::Cuda(0));
  return devices;
}

void ForEachDevice(const std::function<void(const Device&)>& body) {
  for (const Device& device : DevicesPresent()) {
    INFO("on " << DeviceName(device));
    body(device);
  }
  if (CudaDeviceCount() == 0) {
    std::cout << "cuda:0 not run: " << CudaUnavailableReason() << std::endl;
  }
}

Tensor On(const Tensor& host, const Device& device) {
  if (!host.defined()) return Tensor();
  auto t = host.To(device);
  FZ_CHECK(t.ok());
  return *t;
}

Tensor PoisonedOn(Shape shape, const Device& device, DType dtype) {
  auto host = Tensor::Empty(shape, dtype);
  FZ_CHECK(host.ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < host->numel(); ++i) {
    switch (dtype) {
      case DType::kBF16:
        host->data<BFloat16>()[i] = F32ToBF16(nan);
        break;
      case DType::kF16:
        host->data<Float16>()[i] = F32ToF16(nan);
        break;
      default:
        host->data<float>()[i] = nan;
        break;
    }
  }
  return On(*host, device);
}

void CheckCloseTo(const Tensor& got, const std::vector<double>& want, testing::Tolerance tol) {
  const auto r = testing::CompareValues(testing::ToFloatVector(got), want, tol);
  INFO(r.message);
  INFO("max abs error " << r.max_abs_error << ", max rel error " << r.max_rel_error);
  CHECK(r.ok);
}

void CheckWithinRmsOf(const Tensor& got, const std::vector<double>& want, RmsTolerance tol) {
  double sum_sq = 0;
  for (double w : want) sum_sq += w * w;
  const double rms = want.empty() ? 0 : std::sqrt(sum_sq / static_cast<double>(want.size()));
  REQUIRE(rms > 0);
  CheckCloseTo(got, want, {tol.element * rms, 0.0});
  const std::vector<float> got_values = testing::ToFloatVector(got);
  REQUIRE(got_values.size() == want.size());
  double err_sq = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got_values[i]) - want[i];
    err_sq += d * d;
  }
  const double l2 = std::sqrt(err_sq / sum_sq);
  INFO("relative L2 error " << l2);
  CHECK(l2 <= tol.l2);  // NaN fails here too
}

std::vector<double> RoundedTo(const std::vector<double>& values, DType dtype) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    switch (dtype) {
      case DType::kBF16:
        out[i] = BF16ToF32(F32ToBF16(f));
        break;
      case DType::kF16:
        out[i] = F16ToF32(F32ToF16(f));
        break;
      default:
        out[i] = f;
        break;
    }
  }
  return out;
}

}  // namespace framezip::engine::test
