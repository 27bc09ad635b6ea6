#include "engine/core/tensor.h"

#include <catch2/catch.hpp>

#include "engine/core/half.h"

namespace framezip::engine {
namespace {

TEST_CASE("tensors allocate aligned, slice and reshape without copying", "[unit][engine]") {
  auto t = Tensor::Zeros({4, 3}, DType::kF32);
  REQUIRE(t.ok());
  CHECK(reinterpret_cast<uintptr_t>(t->raw_data()) % 64 == 0);
  for (int i = 0; i < 12; ++i) t->data<float>()[i] = static_cast<float>(i);
  auto rows = t->Slice(1, 3);
  REQUIRE(rows.ok());
  CHECK(rows->shape() == Shape{2, 3});
  CHECK(rows->data<float>()[0] == 3.f);
  CHECK(rows->buffer().data() == t->buffer().data());
  auto flat = t->Reshape({12});
  REQUIRE(flat.ok());
  CHECK(flat->data<float>()[11] == 11.f);
  CHECK(t->Reshape({5}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(t->Slice(2, 5).status().code() == absl::StatusCode::kOutOfRange);
  CHECK(Tensor::Empty({-1}, DType::kF32).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("FromBuffer refuses a view past the end of its buffer", "[unit][engine]") {
  auto buffer = Buffer::Allocate(Device::Cpu(), 16);
  REQUIRE(buffer.ok());
  CHECK(Tensor::FromBuffer(*buffer, 0, {4}, DType::kF32).ok());
  CHECK(Tensor::FromBuffer(*buffer, 4, {4}, DType::kF32).status().code() ==
        absl::StatusCode::kOutOfRange);
}

TEST_CASE("device names parse and CUDA absence is reported, not fatal", "[unit][engine]") {
  CHECK(*ParseDevice("cpu") == Device::Cpu());
  CHECK(*ParseDevice("cuda:1") == Device::Cuda(1));
  CHECK(ParseDevice("gpu").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ParseDevice("cuda:x").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(AvailableDevices().front() == Device::Cpu());
  if (CudaDeviceCount() == 0) {
    const Status s = CheckDeviceUsable(Device::Cuda(0));
    CHECK_FALSE(s.ok());
    CHECK_FALSE(CudaUnavailableReason().empty());
    CHECK(Tensor::Empty({4}, DType::kF32, Device::Cuda(0)).status().code() == s.code());
  }
}

TEST_CASE("bf16 and f16 conversions round to nearest even like torch", "[unit][engine]") {
  // Exhaustive over every 16-bit pattern: decode then re-encode is the identity (NaNs stay NaN).
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float b = BF16ToF32(BFloat16{static_cast<uint16_t>(bits)});
    const float h = F16ToF32(Float16{static_cast<uint16_t>(bits)});
    if (b == b) {
      REQUIRE(F32ToBF16(b).bits == bits);
    }
    if (h == h) {
      REQUIRE(F32ToF16(h).bits == bits);
    }
  }
  // Ties go to even: 1 + 2^-8 is halfway between two bf16 values.
  CHECK(F32ToBF16(1.0f + 1.0f / 256).bits == F32ToBF16(1.0f).bits);
  CHECK(F32ToBF16(1.0f + 3.0f / 256).bits == 0x3f82);
  CHECK(F16ToF32(F32ToF16(65504.f)) == 65504.f);
  CHECK(F32ToF16(1e6f).bits == 0x7c00);                        // overflow -> inf
  CHECK(F16ToF32(F32ToF16(6e-8f)) == Approx(5.96046448e-8f));  // smallest subnormal
}

}  // namespace
}  // namespace framezip::engine
